import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.admin.RenewDelegationTokenOptions;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * KIP-48 delegation tokens the way a Java application uses them: the Admin (logged in with the
 * kafka.* properties, a password) creates a token, describes and renews it; a producer logs in
 * with the token (ScramLoginModule tokenauth="true": token id and base64 HMAC) and sends
 * `count` records to `topic` and one to `denied_topic`; an Admin logged in with the token asks
 * for a token of its own; the first Admin expires the token and a new producer tries again.
 * Events: created, described, renewed, sent, token_admin, expired, after_expiry (client errors
 * are reported as their exception's simple name).
 */
public final class KafkaDelegationTokens {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        String mechanism = a.str("token_mechanism", "SCRAM-SHA-512");
        try (Admin admin = Admin.create(props)) {
            DelegationToken token = admin.createDelegationToken(new CreateDelegationTokenOptions()
                    .maxLifetimeMs(a.longValue("max_lifetime_ms", -1))).delegationToken().get();
            TokenInformation info = token.tokenInfo();
            String hmac = Base64.getEncoder().encodeToString(token.hmac());
            Out.emit("created", "token_id", info.tokenId(), "owner", info.owner().toString(),
                    "issue_ms", info.issueTimestamp(), "expiry_ms", info.expiryTimestamp(),
                    "max_ms", info.maxTimestamp(), "hmac_length", token.hmac().length);

            List<DelegationToken> mine = admin.describeDelegationToken().delegationTokens().get();
            for (DelegationToken t : mine) {
                Out.emit("described", "token_id", t.tokenInfo().tokenId(),
                        "owner", t.tokenInfo().owner().toString(),
                        "same_hmac", Base64.getEncoder().encodeToString(t.hmac()).equals(hmac));
            }
            long renewed = admin.renewDelegationToken(token.hmac(), new RenewDelegationTokenOptions()
                    .renewTimePeriodMs(a.longValue("renew_ms", 60000))).expiryTimestamp().get();
            Out.emit("renewed", "expiry_ms", renewed);

            Properties tokenLogin = withToken(props, info.tokenId(), hmac, mechanism);
            send(tokenLogin, a.str("topic"), a.integer("count", 5), "sent");
            send(tokenLogin, a.str("denied_topic"), 1, "denied");
            try (Admin tokenAdmin = Admin.create(tokenLogin)) {
                tokenAdmin.createDelegationToken().delegationToken().get();
                Out.emit("token_admin", "created", true);
            } catch (Exception e) {
                Out.error(cause(e), "step", "token_admin");
            }

            long expired = admin.expireDelegationToken(token.hmac(), new ExpireDelegationTokenOptions()
                    .expiryTimePeriodMs(-1)).expiryTimestamp().get();
            Out.emit("expired", "expiry_ms", expired);
            send(tokenLogin, a.str("topic"), 1, "after_expiry");
        }
    }

    static Properties withToken(Properties base, String tokenId, String hmac, String mechanism) {
        Properties p = new Properties();
        p.put("bootstrap.servers", base.get("bootstrap.servers"));
        p.put("security.protocol", base.getOrDefault("security.protocol", "SASL_PLAINTEXT"));
        p.put("sasl.mechanism", mechanism);
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"" + tokenId + "\" password=\"" + hmac + "\" tokenauth=\"true\";");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    static void send(Properties props, String topic, int count, String event) {
        Properties p = new Properties();
        p.putAll(props);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                byte[] value = ("token-" + i).getBytes(StandardCharsets.UTF_8);
                long offset = producer.send(new ProducerRecord<>(topic, value)).get().offset();
                Out.emit(event, "topic", topic, "offset", offset);
            }
        } catch (Exception e) {
            Out.error(cause(e), "step", event);
        }
    }

    static Throwable cause(Throwable e) {
        while (e.getCause() != null && (e instanceof java.util.concurrent.ExecutionException
                || e.getClass().getName().startsWith("org.apache.kafka.common.KafkaException"))) {
            e = e.getCause();
        }
        return e;
    }
}
