package io.kquota.kafka;

import javax.management.JMX;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Asks a running broker's callback, over JMX, why a (user, client-id) gets its limits:
 *
 * <pre>
 * java -cp kquota-kafka-0.1.0.jar io.kquota.kafka.Explain --jmx HOST:PORT --user alice --client-id app
 * </pre>
 *
 * The broker must have remote JMX on (Kafka's scripts do it with {@code JMX_PORT=PORT}). Exits 0 with
 * the explanation on stdout, 1 if the broker cannot be reached or has no kquota callback, 2 for a bad
 * command line.
 */
public final class Explain {
    private Explain() {
    }

    public static void main(String[] args) {
        String jmx = null;
        String user = null;
        String clientId = null;
        String instance = "0";
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            if (flag.equals("--help") || flag.equals("-h")) {
                System.out.println(usage());
                return;
            }
            if (i + 1 >= args.length) {
                fail(2, flag + " needs a value\n" + usage());
            }
            String value = args[++i];
            switch (flag) {
                case "--jmx" -> jmx = value;
                case "--user" -> user = value;
                case "--client-id" -> clientId = value;
                case "--instance" -> instance = value;
                default -> fail(2, "unknown option " + flag + "\n" + usage());
            }
        }
        if (jmx == null || user == null || clientId == null) {
            fail(2, "--jmx, --user and --client-id are required\n" + usage());
        }
        try {
            JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + jmx + "/jmxrmi");
            try (JMXConnector connector = JMXConnectorFactory.connect(url)) {
                MBeanServerConnection server = connector.getMBeanServerConnection();
                ObjectName name = new ObjectName("io.kquota:type=ClientQuotaCallback,instance=" + instance);
                if (!server.isRegistered(name)) {
                    fail(1, "the broker at " + jmx + " has no kquota callback (" + name + " is not registered)");
                }
                KquotaCallbackMBean callback = JMX.newMBeanProxy(server, name, KquotaCallbackMBean.class);
                System.out.print(callback.explain(user, clientId));
            }
        } catch (Exception e) {
            fail(1, "could not ask the broker at " + jmx + ": " + e);
        }
    }

    private static String usage() {
        return "usage: Explain --jmx HOST:PORT --user USER --client-id CLIENT_ID [--instance N]";
    }

    private static void fail(int status, String message) {
        System.err.println("kquota explain: " + message);
        System.exit(status);
    }
}
