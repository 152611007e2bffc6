import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A KafkaShareConsumer (KIP-932) in explicit acknowledgement mode. With `group_configs`
 * (name=value;name=value) it first sets the share group's configs through Admin's
 * incrementalAlterConfigs on the GROUP resource. It then subscribes to `topic` and acknowledges
 * every record it gets: RELEASE for offsets in `release` on their first delivery (`release_all`:
 * every delivery), REJECT for offsets in `reject`, ACCEPT otherwise; with `hold` it acknowledges
 * nothing and sleeps until `timeout_ms` after its first records (a consumer to kill while it
 * holds records); `sleep_ms` pauses after
 * every poll that returned records (a slow consumer). It stops after
 * `count` distinct accepted records, after `idle_ms` without records once it had some, or after
 * `timeout_ms`; `quiet` leaves out the per-record and error-free commit events (benchmarks). Emits "ready" after subscribing, "record" (offset,
 * value, delivery_count, action) per record, "commit" per commitSync with errors, then "done".
 */
public final class KafkaShareConsume {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        Properties props = a.kafkaProps();
        String group = a.str("group");
        String topic = a.str("topic");
        String configs = a.str("group_configs", "");
        if (!configs.isEmpty()) {
            Properties adminProps = new Properties();
            adminProps.put("bootstrap.servers", props.get("bootstrap.servers"));
            try (Admin admin = Admin.create(adminProps)) {
                List<AlterConfigOp> ops = new java.util.ArrayList<>();
                for (String kv : configs.split(";")) {
                    String[] p = kv.split("=", 2);
                    ops.add(new AlterConfigOp(new ConfigEntry(p[0], p[1]), AlterConfigOp.OpType.SET));
                }
                ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
                Map<ConfigResource, java.util.Collection<AlterConfigOp>> alter = new HashMap<>();
                alter.put(res, ops);
                admin.incrementalAlterConfigs(alter).all().get();
            }
        }
        props.put("group.id", group);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.putIfAbsent("share.acknowledgement.mode", "explicit");
        Set<Long> release = offsets(a.list("release"));
        Set<Long> reject = offsets(a.list("reject"));
        boolean releaseAll = a.flag("release_all", false);
        boolean hold = a.flag("hold", false);
        long sleepMs = a.longValue("sleep_ms", 0);
        long idleMs = a.longValue("idle_ms", 0);
        long lastRecord = 0;
        long firstRecord = 0;
        boolean quiet = a.flag("quiet", false);
        int count = a.integer("count", 10);
        long deadline = System.currentTimeMillis() + a.longValue("timeout_ms", 60_000);
        Set<String> acceptedOnce = new HashSet<>();  // a record accepted again after a failed
        int accepted = 0;                            // commit counts once
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            Out.emit("ready", "group", group);
            while (accepted < count && System.currentTimeMillis() < deadline) {
                if (idleMs > 0 && lastRecord > 0 && System.currentTimeMillis() - lastRecord > idleMs) break;
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (!records.isEmpty()) {
                    lastRecord = System.currentTimeMillis();
                    if (firstRecord == 0) firstRecord = lastRecord;
                }
                if (sleepMs > 0 && !records.isEmpty()) Thread.sleep(sleepMs);
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    int deliveries = r.deliveryCount().map(Short::intValue).orElse(-1);
                    String action = "accept";
                    if (hold) action = "hold";
                    else if (reject.contains(r.offset())) action = "reject";
                    else if (release.contains(r.offset()) && (releaseAll || deliveries == 1)) action = "release";
                    if (!quiet) {
                        Out.emit("record", "offset", r.offset(), "partition", r.partition(), "value", r.value(),
                                "delivery_count", deliveries, "action", action);
                    }
                    if (action.equals("accept")) {
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        if (acceptedOnce.add(r.partition() + ":" + r.offset())) accepted++;
                    } else if (action.equals("release")) {
                        consumer.acknowledge(r, AcknowledgeType.RELEASE);
                    } else if (action.equals("reject")) {
                        consumer.acknowledge(r, AcknowledgeType.REJECT);
                    }
                }
                if (hold && !records.isEmpty()) {
                    // explicit mode forbids polling again before acknowledging: just hold them
                    Thread.sleep(Math.max(0, deadline - System.currentTimeMillis()));
                    break;
                }
                if (!records.isEmpty()) {
                    Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
                    List<Object> errors = new java.util.ArrayList<>();
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
                        e.getValue().ifPresent(ex -> errors.add(ex.getClass().getSimpleName()));
                    }
                    if (!quiet || !errors.isEmpty()) Out.emit("commit", "errors", errors);
                }
            }
            Out.emit("done", "accepted", accepted, "first_ms", firstRecord, "last_ms", lastRecord);
        }
    }

    private static Set<Long> offsets(String[] values) {
        Set<Long> out = new HashSet<>();
        for (String v : values) out.add(Long.parseLong(v));
        return out;
    }
}
