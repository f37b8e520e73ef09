package kquota.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import javax.management.Attribute;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanOperationInfo;
import javax.management.MBeanParameterInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * A small JMX client for the suites that drive a broker's MBeans (kquota-kafka/tests/kafka): reads
 * attributes and invokes operations over JMX RMI (service:jmx:rmi:///jndi/rmi://HOST:PORT/jmxrmi, a
 * JVM started with com.sun.management.jmxremote.port=PORT). Prints one JSON object on stdout; any
 * failure (no connection, no such MBean, attribute or operation) exits non-zero with the error.
 *
 * <pre>
 * Jmx HOST:PORT registered NAME               {"ok":true,"registered":true|false}
 * Jmx HOST:PORT get NAME ATTR...              {"ok":true,"attrs":{"ATTR":value,...}}
 * Jmx HOST:PORT invoke NAME OP [ARG...]       {"ok":true,"result":value}
 * Jmx HOST:PORT set NAME ATTR VALUE           {"ok":true}  (a writable attribute)
 * Jmx HOST:PORT info NAME                     {"ok":true,"attributes":[...],"operations":[...]}
 * </pre>
 *
 * invoke finds the operation OP taking as many parameters as ARGs are given and converts each ARG to
 * its parameter's type (boolean, int, long, double or String). Values print as JSON: numbers and
 * booleans as they are, anything else as its toString().
 */
public final class Jmx {
    private Jmx() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 3) usage();
        JMXServiceURL url = new JMXServiceURL("service:jmx:rmi:///jndi/rmi://" + args[0] + "/jmxrmi");
        try (JMXConnector c = JMXConnectorFactory.connect(url)) {
            MBeanServerConnection s = c.getMBeanServerConnection();
            ObjectName name = new ObjectName(args[2]);
            switch (args[1]) {
                case "registered":
                    if (args.length != 3) usage();
                    System.out.println("{\"ok\":true,\"registered\":" + s.isRegistered(name) + "}");
                    break;
                case "get": {
                    if (args.length < 4) usage();
                    StringBuilder b = new StringBuilder("{\"ok\":true,\"attrs\":{");
                    for (int i = 3; i < args.length; i++) {
                        if (i > 3) b.append(',');
                        b.append(json(args[i])).append(':').append(value(s.getAttribute(name, args[i])));
                    }
                    System.out.println(b.append("}}"));
                    break;
                }
                case "invoke": {
                    if (args.length < 4) usage();
                    int n = args.length - 4;
                    MBeanInfo info = s.getMBeanInfo(name);
                    MBeanOperationInfo op = null;
                    for (MBeanOperationInfo o : info.getOperations()) {
                        if (o.getName().equals(args[3]) && o.getSignature().length == n) op = o;
                    }
                    if (op == null) {
                        List<String> ops = new ArrayList<>();
                        for (MBeanOperationInfo o : info.getOperations()) ops.add(o.getName() + "/" + o.getSignature().length);
                        throw new IllegalArgumentException(name + " has no operation " + args[3] + " with " + n
                                + " parameters (it has " + ops + ")");
                    }
                    MBeanParameterInfo[] sig = op.getSignature();
                    Object[] params = new Object[n];
                    String[] types = new String[n];
                    for (int i = 0; i < n; i++) {
                        types[i] = sig[i].getType();
                        params[i] = convert(args[4 + i], types[i]);
                    }
                    Object r = s.invoke(name, args[3], params, types);
                    System.out.println("{\"ok\":true,\"result\":" + value(r) + "}");
                    break;
                }
                case "set": {
                    if (args.length != 5) usage();
                    MBeanAttributeInfo attr = null;
                    for (MBeanAttributeInfo a : s.getMBeanInfo(name).getAttributes()) {
                        if (a.getName().equals(args[3])) attr = a;
                    }
                    if (attr == null || !attr.isWritable()) {
                        throw new IllegalArgumentException(name + " has no writable attribute " + args[3]);
                    }
                    s.setAttribute(name, new Attribute(args[3], convert(args[4], attr.getType())));
                    System.out.println("{\"ok\":true}");
                    break;
                }
                case "info": {
                    if (args.length != 3) usage();
                    MBeanInfo info = s.getMBeanInfo(name);
                    StringBuilder b = new StringBuilder("{\"ok\":true,\"attributes\":[");
                    MBeanAttributeInfo[] attrs = info.getAttributes();
                    for (int i = 0; i < attrs.length; i++) {
                        if (i > 0) b.append(',');
                        b.append(json(attrs[i].getName() + ":" + attrs[i].getType() + (attrs[i].isWritable() ? ":rw" : ":r")));
                    }
                    b.append("],\"operations\":[");
                    MBeanOperationInfo[] ops = info.getOperations();
                    for (int i = 0; i < ops.length; i++) {
                        if (i > 0) b.append(',');
                        StringBuilder sig = new StringBuilder();
                        for (MBeanParameterInfo p : ops[i].getSignature()) {
                            if (sig.length() > 0) sig.append(',');
                            sig.append(p.getType());
                        }
                        b.append(json(ops[i].getReturnType() + " " + ops[i].getName() + "(" + sig + ")"));
                    }
                    System.out.println(b.append("]}"));
                    break;
                }
                default:
                    usage();
            }
        }
    }

    private static void usage() {
        System.err.println("usage: Jmx HOST:PORT registered NAME | get NAME ATTR... | invoke NAME OP [ARG...]"
                + " | set NAME ATTR VALUE | info NAME");
        System.exit(2);
    }

    private static Object convert(String v, String type) {
        switch (type) {
            case "boolean":
            case "java.lang.Boolean":
                if (!v.equals("true") && !v.equals("false")) throw new IllegalArgumentException("not a boolean: " + v);
                return Boolean.valueOf(v);
            case "int":
            case "java.lang.Integer":
                return Integer.valueOf(v);
            case "long":
            case "java.lang.Long":
                return Long.valueOf(v);
            case "double":
            case "java.lang.Double":
                return Double.valueOf(v);
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
