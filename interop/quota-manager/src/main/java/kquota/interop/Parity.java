package kquota.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Sanitizer;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.network.Session;
import org.apache.kafka.server.config.ClientQuotaManagerConfig;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.QuotaType;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;

/**
 * Feeds configured quotas to Kafka's own ClientQuotaManager (one per quota type, as a broker has) and
 * prints, for every (user, client-id) pair, the limit and the metric tags (the sensor, i.e. the bucket)
 * Kafka would meter the pair's requests with.
 *
 * <p>Input on stdin, one case per line:
 * {@code {"case":N,"quotas":[{"user":"u"|null,"client_id":"c"|null,"values":{"producer_byte_rate":1.0}}],
 * "pairs":[["u","c"]]}}. A missing {@code user} or {@code client_id} is an absent component; {@code null}
 * is the default. Output, one JSON object a line:
 * {@code {"case":N,"pair":i,"key":"producer_byte_rate","limit":1.0,"user":"tag","client_id":"tag"}}.
 * Kafka's "no quota" is a bound of Long.MAX_VALUE, printed as it is.
 */
public final class Parity {
    private static final Map<String, QuotaType> TYPES = new LinkedHashMap<>();

    static {
        TYPES.put("producer_byte_rate", QuotaType.PRODUCE);
        TYPES.put("consumer_byte_rate", QuotaType.FETCH);
        TYPES.put("request_percentage", QuotaType.REQUEST);
    }

    private Parity() {
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            runCase(json, json.readTree(line), out);
        }
        out.flush();
        if (out.checkError()) {
            System.err.println("parity: failed to write the results");
            System.exit(1);
        }
    }

    private static void runCase(ObjectMapper json, JsonNode input, PrintStream out) throws Exception {
        long caseId = input.get("case").asLong();
        Metrics metrics = new Metrics(Time.SYSTEM);
        Map<String, ClientQuotaManager> managers = new LinkedHashMap<>();
        try {
            for (Map.Entry<String, QuotaType> t : TYPES.entrySet()) {
                managers.put(t.getKey(), new ClientQuotaManager(new ClientQuotaManagerConfig(), metrics,
                        t.getValue(), Time.SYSTEM, "parity-"));
            }
            for (JsonNode q : input.get("quotas")) {
                Optional<ClientQuotaEntity.ConfigEntity> user = Optional.empty();
                Optional<ClientQuotaEntity.ConfigEntity> client = Optional.empty();
                // The broker's ClientQuotaMetadataManager.transferToClientQuotaEntity: users are sanitized,
                // client-ids are not, and a default is the shared sentinel object, not a name.
                if (q.has("user")) {
                    user = Optional.of(q.get("user").isNull()
                            ? ClientQuotaManager.DEFAULT_USER_ENTITY
                            : new ClientQuotaManager.UserEntity(Sanitizer.sanitize(q.get("user").asText())));
                }
                if (q.has("client_id")) {
                    client = Optional.of(q.get("client_id").isNull()
                            ? ClientQuotaManager.DEFAULT_USER_CLIENT_ID
                            : new ClientQuotaManager.ClientIdEntity(q.get("client_id").asText()));
                }
                var values = q.get("values").fields();
                while (values.hasNext()) {
                    var v = values.next();
                    ClientQuotaManager manager = managers.get(v.getKey());
                    if (manager == null) {
                        throw new IllegalArgumentException("case " + caseId + ": unknown key " + v.getKey());
                    }
                    manager.updateQuota(user, client, Optional.of(new Quota(v.getValue().asDouble(), true)));
                }
            }
            int index = 0;
            for (JsonNode pair : input.get("pairs")) {
                String user = pair.get(0).asText();
                String clientId = pair.get(1).asText();
                Session session = new Session(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, user),
                        InetAddress.getLoopbackAddress());
                for (Map.Entry<String, ClientQuotaManager> m : managers.entrySet()) {
                    QuotaType type = TYPES.get(m.getKey());
                    // The request path: the sensors a request of this connection records into.
                    Map<String, String> tags = m.getValue().getOrCreateQuotaSensors(session, clientId).metricTags();
                    MetricName name = metrics.metricName("byte-rate", type.toString(), tags);
                    KafkaMetric metric = metrics.metric(name);
                    if (metric == null) {
                        throw new IllegalStateException("case " + caseId + ": no quota metric " + name);
                    }
                    double bound = metric.config().quota().bound();
                    double viaQuota = m.getValue().quota(user, clientId).bound();
                    if (Double.compare(bound, viaQuota) != 0) {
                        throw new IllegalStateException("case " + caseId + ": sensor bound " + bound
                                + " differs from quota(" + user + ", " + clientId + ") = " + viaQuota);
                    }
                    ObjectNode row = json.createObjectNode();
                    row.put("case", caseId);
                    row.put("pair", index);
                    row.put("key", m.getKey());
                    row.put("limit", bound);
                    row.put("user", tags.get(ClientQuotaManager.USER_TAG));
                    row.put("client_id", tags.get(ClientQuotaManager.CLIENT_ID_TAG));
                    out.println(json.writeValueAsString(row));
                }
                index++;
            }
        } finally {
            for (ClientQuotaManager m : managers.values()) {
                m.shutdown();
            }
            metrics.close();
        }
    }
}
