package kquota.interop;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.function.Predicate;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.DescribeUserScramCredentialsResult;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

/**
 * Drives a broker's client-quota APIs through Kafka's own Java {@link Admin} client and prints every
 * outcome in a sorted, stable form, so the same run against Apache Kafka and against kquotad can be
 * compared line by line (tests/kafka/test_clients.py does).
 *
 * <p>Usage: {@code AdminCheck <bootstrap> <prefix>}. Every entity name starts with the prefix, so runs
 * do not see each other; describes that can match other entities print only the prefixed ones.
 *
 * <p>It also describes SCRAM credentials ({@code describeUserScramCredentials}, apiKey 50): every
 * user, named users and a user named twice, printing only users with the prefix.
 *
 * <p>Apache Kafka applies alterations through its controller and answers describes from the broker's
 * metadata image, which follows a little later; the program therefore waits (bounded) until a describe
 * shows each committed alteration before describing.
 */
public final class AdminCheck {
    private static final long SETTLE_TIMEOUT_MS = 15_000;

    private final Admin admin;
    private final String prefix;

    private AdminCheck(Admin admin, String prefix) {
        this.admin = admin;
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: AdminCheck <bootstrap> <name prefix>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "kquota-admincheck");
        // The Admin client's default timeouts: nothing here may need to wait for one.
        try (Admin admin = Admin.create(props)) {
            new AdminCheck(admin, args[1]).run();
        }
    }

    private static ClientQuotaEntity entity(String... typeName) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < typeName.length; i += 2) {
            m.put(typeName[i], typeName[i + 1]);
        }
        return new ClientQuotaEntity(m);
    }

    private static ClientQuotaAlteration alteration(ClientQuotaEntity e, Object... keyValue) {
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        for (int i = 0; i < keyValue.length; i += 2) {
            ops.add(new ClientQuotaAlteration.Op((String) keyValue[i], (Double) keyValue[i + 1]));
        }
        return new ClientQuotaAlteration(e, ops);
    }

    /** {client-id=<default>, user=x}: types sorted, the default spelled as Kafka's tools spell it. */
    private static String show(ClientQuotaEntity e) {
        Map<String, String> sorted = new TreeMap<>();
        e.entries().forEach((t, n) -> sorted.put(t, n == null ? "<default>" : n));
        return sorted.toString();
    }

    private static String failure(Throwable t) {
        Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
        return cause.getClass().getSimpleName() + ": " + cause.getMessage();
    }

    private void alter(String label, List<ClientQuotaAlteration> alterations, boolean validateOnly) {
        Map<ClientQuotaEntity, KafkaFuture<Void>> results = admin.alterClientQuotas(
                alterations, new AlterClientQuotasOptions().validateOnly(validateOnly)).values();
        Map<String, String> lines = new TreeMap<>();
        results.forEach((e, f) -> {
            String outcome;
            try {
                f.get();
                outcome = "OK";
            } catch (InterruptedException | ExecutionException ex) {
                outcome = failure(ex);
            }
            lines.put(show(e), outcome);
        });
        lines.forEach((e, outcome) -> System.out.println(label + " " + e + ": " + outcome));
    }

    private Map<ClientQuotaEntity, Map<String, Double>> query(ClientQuotaFilter filter) throws Exception {
        return admin.describeClientQuotas(filter).entities().get();
    }

    private boolean ours(ClientQuotaEntity e) {
        return e.entries().values().stream().anyMatch(n -> n != null && n.startsWith(prefix));
    }

    private void describe(String label, ClientQuotaFilter filter, Predicate<ClientQuotaEntity> keep) {
        try {
            Map<String, String> lines = new TreeMap<>();
            query(filter).forEach((e, values) -> {
                if (keep.test(e)) {
                    lines.put(show(e), new TreeMap<>(values).toString());
                }
            });
            System.out.println(label + ": " + lines.size() + " entities");
            lines.forEach((e, v) -> System.out.println(label + " " + e + " " + v));
        } catch (Exception ex) {
            System.out.println(label + ": " + failure(ex));
        }
    }

    /** Waits until a strict describe of exactly this entity shows these values. */
    private void settle(ClientQuotaEntity e, Map<String, Double> want) throws Exception {
        List<ClientQuotaFilterComponent> components = new ArrayList<>();
        e.entries().forEach((t, n) -> components.add(
                n == null ? ClientQuotaFilterComponent.ofDefaultEntity(t) : ClientQuotaFilterComponent.ofEntity(t, n)));
        long deadline = System.currentTimeMillis() + SETTLE_TIMEOUT_MS;
        while (true) {
            Map<String, Double> got = query(ClientQuotaFilter.containsOnly(components)).getOrDefault(e, Map.of());
            if (got.equals(want)) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the broker did not show " + want + " for " + show(e)
                        + " within " + SETTLE_TIMEOUT_MS + " ms; it shows " + got);
            }
            Thread.sleep(20);
        }
    }

    /** Describes SCRAM credentials of {@code users} (every user for null), as each future reports. */
    private void scram(String label, List<String> users) {
        DescribeUserScramCredentialsResult result = users == null
                ? admin.describeUserScramCredentials()
                : admin.describeUserScramCredentials(users);
        try {
            List<String> names = new ArrayList<>(result.users().get());
            names.removeIf(n -> !n.startsWith(prefix));
            System.out.println(label + " users: " + new TreeSet<>(names));
        } catch (Exception ex) {
            System.out.println(label + " users: " + failure(ex));
        }
        for (String user : users == null ? List.<String>of() : new TreeSet<>(users)) {
            try {
                Map<String, Integer> infos = new TreeMap<>();
                for (ScramCredentialInfo info : result.description(user).get().credentialInfos()) {
                    infos.put(info.mechanism().mechanismName(), info.iterations());
                }
                System.out.println(label + " " + user + ": " + infos);
            } catch (Exception ex) {
                System.out.println(label + " " + user + ": " + failure(ex));
            }
        }
        try {
            Map<String, ?> all = new TreeMap<>(result.all().get());
            all.keySet().removeIf(n -> !n.startsWith(prefix));
            System.out.println(label + " all: " + all.keySet());
        } catch (Exception ex) {
            System.out.println(label + " all: " + failure(ex));
        }
    }

    private void run() throws Exception {
        String alice = prefix + "alice", bob = prefix + "bob", carol = prefix + "carol";
        String dave = prefix + "dave", app = prefix + "app";
        ClientQuotaEntity eAlice = entity("user", alice);
        ClientQuotaEntity eAliceApp = entity("user", alice, "client-id", app);
        ClientQuotaEntity eBobDefault = entity("user", bob, "client-id", null);

        alter("alter", List.of(
                alteration(eAlice, "producer_byte_rate", 1024.0, "consumer_byte_rate", 2048.0),
                alteration(eAliceApp, "producer_byte_rate", 512.0),
                alteration(eBobDefault, "controller_mutation_rate", 5.5),
                alteration(entity("ip", "not_an_ip!!"), "connection_creation_rate", 5.0),
                alteration(entity("user", carol), "request_percentage", -1.0),
                alteration(entity("user", carol, "client-id", app), "producer_byte_rate", 2.5)), false);
        alter("validate-only", List.of(
                alteration(entity("user", dave), "producer_byte_rate", 1.0),
                alteration(eAlice, "producer_byte_rate", 99.0),
                alteration(entity("user", dave, "client-id", app), "unknown_key", 1.0)), true);
        settle(eAlice, Map.of("producer_byte_rate", 1024.0, "consumer_byte_rate", 2048.0));
        settle(eAliceApp, Map.of("producer_byte_rate", 512.0));
        settle(eBobDefault, Map.of("controller_mutation_rate", 5.5));

        alter("remove", List.of(alteration(eAlice, "consumer_byte_rate", null),
                alteration(entity("user", dave), "producer_byte_rate", null)), false);
        settle(eAlice, Map.of("producer_byte_rate", 1024.0));

        describe("exact-strict", ClientQuotaFilter.containsOnly(
                List.of(ClientQuotaFilterComponent.ofEntity("user", alice))), e -> true);
        describe("exact", ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity("user", alice))), e -> true);
        describe("default-strict", ClientQuotaFilter.containsOnly(List.of(
                ClientQuotaFilterComponent.ofEntity("user", bob),
                ClientQuotaFilterComponent.ofDefaultEntity("client-id"))), e -> true);
        describe("default-client", ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofDefaultEntity("client-id"))), this::ours);
        describe("any-user-strict", ClientQuotaFilter.containsOnly(
                List.of(ClientQuotaFilterComponent.ofEntityType("user"))), this::ours);
        describe("any-client", ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntityType("client-id"))), this::ours);
        describe("validated-only", ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity("user", dave))), e -> true);
        describe("all", ClientQuotaFilter.all(), this::ours);
        describe("unsupported-type", ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity("group", "g"))), e -> true);
        describe("ip-with-user", ClientQuotaFilter.contains(List.of(
                ClientQuotaFilterComponent.ofEntity("ip", "10.0.0.1"),
                ClientQuotaFilterComponent.ofEntity("user", alice))), e -> true);

        scram("scram-every", null);
        scram("scram-named", List.of(alice, bob));
        scram("scram-twice", List.of(carol, carol));
    }
}
