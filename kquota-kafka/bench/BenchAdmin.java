import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * kquota-kafka/bench/producer.sh's admin steps, run with Java's single-file launcher on Kafka's class path.
 *
 * <pre>
 * BenchAdmin setup BOOTSTRAP TOPIC N   creates TOPIC (1 partition) and gives N entities quotas through
 *                                      Admin.alterClientQuotas, 1,000 per call: a third each {user,
 *                                      client-id}, {user}, {client-id} (names bench-user-i / bench-client-i,
 *                                      none the producer's), each with producer_byte_rate and
 *                                      request_percentage; prints how many entities the broker describes
 * BenchAdmin jmx HOST:PORT             prints the kquota callback's Entities attribute (JMX)
 * </pre>
 */
public final class BenchAdmin {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "setup" -> setup(args[1], args[2], Integer.parseInt(args[3]));
            case "jmx" -> jmx(args[1]);
            default -> throw new IllegalArgumentException("usage: setup BOOTSTRAP TOPIC N | jmx HOST:PORT");
        }
    }

    static void setup(String bootstrap, String topic, int n) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            Map<String, String> topicConfig = Map.of("segment.bytes", String.valueOf(64 << 20),
                    "retention.bytes", String.valueOf(256 << 20));
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(topicConfig)))
                    .all().get(60, TimeUnit.SECONDS);
            List<ClientQuotaAlteration> batch = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                Map<String, String> parts = new HashMap<>();
                switch (i % 3) {
                    case 0 -> {
                        parts.put(ClientQuotaEntity.USER, "bench-user-" + i);
                        parts.put(ClientQuotaEntity.CLIENT_ID, "bench-client-" + i);
                    }
                    case 1 -> parts.put(ClientQuotaEntity.USER, "bench-user-" + i);
                    default -> parts.put(ClientQuotaEntity.CLIENT_ID, "bench-client-" + i);
                }
                batch.add(new ClientQuotaAlteration(new ClientQuotaEntity(parts), List.of(
                        new ClientQuotaAlteration.Op("producer_byte_rate", 1_000_000.0 + i),
                        new ClientQuotaAlteration.Op("request_percentage", 200.0))));
                if (batch.size() == 1_000 || i == n - 1) {
                    admin.alterClientQuotas(batch).all().get(120, TimeUnit.SECONDS);
                    batch.clear();
                }
            }
            // The broker applies the metadata log asynchronously: wait until it describes them all.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            int described;
            do {
                described = admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get(60, TimeUnit.SECONDS).size();
                if (described > n) {
                    break;
                }
                Thread.sleep(200);
            } while (System.nanoTime() < deadline);
            System.out.println("described " + described);
        }
    }

    static void jmx(String hostPort) throws Exception {
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + hostPort + "/jmxrmi");
        try (JMXConnector c = JMXConnectorFactory.connect(url)) {
            Object entities = c.getMBeanServerConnection()
                    .getAttribute(new ObjectName("io.kquota:type=ClientQuotaCallback,instance=0"), "Entities");
            System.out.println("entities " + entities);
        }
    }
}
