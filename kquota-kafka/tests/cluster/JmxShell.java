import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import javax.management.MBeanOperationInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * The cluster suite's JMX client (kquota-kafka/tests/cluster/suite.py): one JVM for the whole run,
 * reading requests from stdin and answering each with one JSON line on stdout, so that the suite can
 * poll three brokers' MBeans every few hundred milliseconds without starting a JVM per read (three
 * brokers already share the machine's two cores). Run in source-file mode on Kafka's classpath:
 *
 * <pre>
 * java -Dsun.rmi.transport.tcp.responseTimeout=15000 JmxShell.java
 * </pre>
 *
 * <p>Requests, one per line, fields separated by tabs:
 *
 * <pre>
 * get HOST:PORT NAME ATTR...        {"ok":true,"attrs":{"ATTR":value,...}}
 * invoke HOST:PORT NAME OP [ARG...] {"ok":true,"result":value}  (String, int, long, boolean args)
 * registered HOST:PORT NAME         {"ok":true,"registered":true|false}
 * query HOST:PORT PATTERN           {"ok":true,"names":["NAME",...]}  (sorted)
 * </pre>
 *
 * <p>Any failure answers {"ok":false,"error":"..."} and the shell goes on. A connection is kept
 * per address and dropped at its first failure (a broker killed and started again is reached
 * through a new one on the next request).
 */
public final class JmxShell {
    private final Map<String, JMXConnector> connections = new HashMap<>();

    public static void main(String[] args) throws Exception {
        JmxShell shell = new JmxShell();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("{\"ok\":true,\"ready\":true}");
        System.out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String answer;
            try {
                answer = shell.handle(line.split("\t", -1));
            } catch (Exception e) {
                answer = "{\"ok\":false,\"error\":" + json(e.toString()) + "}";
            }
            System.out.println(answer);
            System.out.flush();
        }
        for (JMXConnector c : shell.connections.values()) {
            try {
                c.close();
            } catch (Exception ignored) {
                // the shell is ending
            }
        }
    }

    private String handle(String[] a) throws Exception {
        if (a.length < 3) throw new IllegalArgumentException("a request is: VERB HOST:PORT NAME ...");
        String addr = a[1];
        ObjectName name = new ObjectName(a[2]);
        try {
            return call(connection(addr), a, name);
        } catch (Exception e) {
            // The connection may be to a broker that was stopped since: drop it, so the next
            // request connects anew, and say what failed.
            JMXConnector c = connections.remove(addr);
            if (c != null) {
                try {
                    c.close();
                } catch (Exception ignored) {
                    // already broken
                }
            }
            throw e;
        }
    }

    private MBeanServerConnection connection(String addr) throws Exception {
        JMXConnector c = connections.get(addr);
        if (c == null) {
            JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + addr + "/jmxrmi");
            c = JMXConnectorFactory.connect(url);
            connections.put(addr, c);
        }
        return c.getMBeanServerConnection();
    }

    private static String call(MBeanServerConnection s, String[] a, ObjectName name) throws Exception {
        switch (a[0]) {
            case "registered":
                return "{\"ok\":true,\"registered\":" + s.isRegistered(name) + "}";
            case "query": {
                StringBuilder b = new StringBuilder("{\"ok\":true,\"names\":[");
                int i = 0;
                for (ObjectName o : new TreeSet<>(s.queryNames(name, null))) {
                    if (i++ > 0) b.append(',');
                    b.append(json(o.toString()));
                }
                return b.append("]}").toString();
            }
            case "get": {
                StringBuilder b = new StringBuilder("{\"ok\":true,\"attrs\":{");
                for (int i = 3; i < a.length; i++) {
                    if (i > 3) b.append(',');
                    b.append(json(a[i])).append(':').append(value(s.getAttribute(name, a[i])));
                }
                return b.append("}}").toString();
            }
            case "invoke": {
                if (a.length < 4) throw new IllegalArgumentException("invoke needs an operation");
                int n = a.length - 4;
                MBeanOperationInfo op = null;
                for (MBeanOperationInfo o : s.getMBeanInfo(name).getOperations()) {
                    if (o.getName().equals(a[3]) && o.getSignature().length == n) op = o;
                }
                if (op == null) {
                    throw new IllegalArgumentException(name + " has no operation " + a[3] + " with " + n + " parameters");
                }
                Object[] params = new Object[n];
                String[] types = new String[n];
                for (int i = 0; i < n; i++) {
                    types[i] = op.getSignature()[i].getType();
                    params[i] = convert(a[4 + i], types[i]);
                }
                return "{\"ok\":true,\"result\":" + value(s.invoke(name, a[3], params, types)) + "}";
            }
            default:
                throw new IllegalArgumentException("unknown verb " + a[0] + " (get, invoke, registered, query)");
        }
    }

    private static Object convert(String v, String type) {
        switch (type) {
            case "boolean":
            case "java.lang.Boolean":
                return Boolean.valueOf(v);
            case "int":
            case "java.lang.Integer":
                return Integer.valueOf(v);
            case "long":
            case "java.lang.Long":
                return Long.valueOf(v);
            case "java.lang.String":
                return v;
            default:
                throw new IllegalArgumentException("cannot pass a parameter of type " + type);
        }
    }

    private static String value(Object o) {
        if (o == null) return "null";
        if (o instanceof Boolean || o instanceof Integer || o instanceof Long || o instanceof Short || o instanceof Byte) {
            return o.toString();
        }
        if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            return Double.isFinite(d) ? String.format(Locale.ROOT, "%s", d) : "null";
        }
        return json(o.toString());
    }

    private static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (ch < 0x20) b.append(String.format(Locale.ROOT, "\\u%04x", (int) ch));
                    else b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
