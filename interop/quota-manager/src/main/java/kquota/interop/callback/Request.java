package kquota.interop.callback;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.network.Session;

import java.net.InetAddress;

/** A connection's principal and a request's client-id, with the broker's Session for them. */
record Request(KafkaPrincipal principal, String clientId, Session session) {

    static Request of(String principalType, String user, String clientId) {
        KafkaPrincipal principal = new KafkaPrincipal(principalType, user);
        return new Request(principal, clientId, new Session(principal, InetAddress.getLoopbackAddress()));
    }

    static Request of(String user, String clientId) {
        return of(KafkaPrincipal.USER_TYPE, user, clientId);
    }

    String user() {
        return principal.getName();
    }

    @Override
    public String toString() {
        String type = KafkaPrincipal.USER_TYPE.equals(principal.getPrincipalType())
                ? "" : " (principal type " + principal.getPrincipalType() + ")";
        return "(user " + Names.show(user()) + type + ", client-id " + Names.show(clientId) + ")";
    }
}
