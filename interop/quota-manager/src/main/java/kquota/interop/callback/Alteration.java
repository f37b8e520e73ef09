package kquota.interop.callback;

import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaManager;
import org.apache.kafka.server.quota.QuotaType;

import java.util.Optional;

/**
 * One quota alteration as a broker applies it: one entity, one quota type, a new value or a removal
 * ({@code value == null}). {@code user} and {@code clientId} are raw names, null where the shape has no
 * named part.
 */
record Alteration(Shape shape, String user, String clientId, QuotaType type, Double value) {

    /** What a part of an entity is: absent, a name, or the default. */
    enum Part { NONE, NAMED, DEFAULT }

    /** The eight entity shapes Kafka's quota precedence distinguishes. */
    enum Shape {
        USER(Part.NAMED, Part.NONE),
        DEFAULT_USER(Part.DEFAULT, Part.NONE),
        USER_CLIENT_ID(Part.NAMED, Part.NAMED),
        USER_DEFAULT_CLIENT_ID(Part.NAMED, Part.DEFAULT),
        DEFAULT_USER_CLIENT_ID(Part.DEFAULT, Part.NAMED),
        DEFAULT_USER_DEFAULT_CLIENT_ID(Part.DEFAULT, Part.DEFAULT),
        CLIENT_ID(Part.NONE, Part.NAMED),
        DEFAULT_CLIENT_ID(Part.NONE, Part.DEFAULT);

        final Part user;
        final Part clientId;

        Shape(Part user, Part clientId) {
            this.user = user;
            this.clientId = clientId;
        }
    }

    /** The alteration of {@code shape}'s entity; names the shape has no place for are dropped. */
    static Alteration of(Shape shape, String user, String clientId, QuotaType type, Double value) {
        return new Alteration(shape, shape.user == Part.NAMED ? user : null,
                shape.clientId == Part.NAMED ? clientId : null, type, value);
    }

    Optional<ClientQuotaEntity.ConfigEntity> userEntity() {
        return switch (shape.user) {
            case NONE -> Optional.empty();
            case NAMED -> Optional.of(Names.user(user));
            case DEFAULT -> Optional.of(ClientQuotaManager.DEFAULT_USER_ENTITY);
        };
    }

    Optional<ClientQuotaEntity.ConfigEntity> clientIdEntity() {
        return switch (shape.clientId) {
            case NONE -> Optional.empty();
            case NAMED -> Optional.of(Names.clientId(clientId));
            case DEFAULT -> Optional.of(ClientQuotaManager.DEFAULT_USER_CLIENT_ID);
        };
    }

    /** The entity as ClientQuotaManager.updateQuota hands it to a callback. */
    ClientQuotaManager.KafkaQuotaEntity entity() {
        return new ClientQuotaManager.KafkaQuotaEntity(userEntity().orElse(null), clientIdEntity().orElse(null));
    }

    /** Applies the alteration through the broker's path: the quota manager of its type. */
    void applyTo(Managers managers) {
        managers.manager(type).updateQuota(userEntity(), clientIdEntity(),
                Optional.ofNullable(value).map(v -> new Quota(v, true)));
    }

    /** Applies the alteration straight to a callback, as ClientQuotaManager.updateQuota calls it. */
    void applyTo(ClientQuotaCallback callback) {
        if (value == null) {
            callback.removeQuota(QuotaType.toClientQuotaType(type), entity());
        } else {
            callback.updateQuota(QuotaType.toClientQuotaType(type), entity(), value);
        }
    }

    @Override
    public String toString() {
        String entity = switch (shape.user) {
            case NONE -> "";
            case NAMED -> "user=" + Names.show(user);
            case DEFAULT -> "user=<default>";
        };
        String client = switch (shape.clientId) {
            case NONE -> "";
            case NAMED -> "client-id=" + Names.show(clientId);
            case DEFAULT -> "client-id=<default>";
        };
        String both = entity.isEmpty() || client.isEmpty() ? entity + client : entity + ", " + client;
        return (value == null ? "remove " : "set ") + type + " {" + both + "}" + (value == null ? "" : " = " + value);
    }
}
