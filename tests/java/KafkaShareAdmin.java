import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Java Admin's share-group calls by `op`: describe (group), list_offsets (group),
 * alter_offsets (group, topic, partition, offset), delete_offsets (group, topic), delete (group).
 * Emits one event named after the op with what it returned; a refused call emits "error".
 * With serve=true, one Admin serves every call read from stdin (see Serve).
 */
public final class KafkaShareAdmin {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        try (Admin admin = Admin.create(a.kafkaProps())) {
            if (a.flag("serve", false)) {  // many calls on one Admin (Serve)
                Serve.lines(call -> run(admin, call));
            } else {
                run(admin, a);
            }
        }
    }

    static void run(Admin admin, Args a) throws Exception {
        String group = a.str("group");
        switch (a.str("op")) {
            case "describe" -> {
                ShareGroupDescription d;
                try {
                    d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                } catch (ExecutionException e) {
                    Out.error(e.getCause());
                    return;
                }
                List<Object> members = new ArrayList<>();
                for (ShareMemberDescription m : d.members()) {
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.toString());
                    members.add(Out.map("member", m.consumerId(), "client", m.clientId(), "assignment", parts));
                }
                Out.emit("describe", "state", d.groupState().toString(), "members", members,
                        "epoch", d.groupEpoch());
            }
            case "list_offsets" -> {
                Map<String, ListShareGroupOffsetsSpec> spec = new HashMap<>();
                spec.put(group, new ListShareGroupOffsetsSpec());
                Map<TopicPartition, SharePartitionOffsetInfo> got =
                        admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group).get();
                List<Object> out = new ArrayList<>();
                for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : got.entrySet()) {
                    out.add(Out.map("partition", e.getKey().toString(),
                            "start", e.getValue() == null ? null : e.getValue().startOffset()));
                }
                Out.emit("list_offsets", "offsets", out);
            }
            case "alter_offsets" -> {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                offsets.put(new TopicPartition(a.str("topic"), a.integer("partition", 0)), a.longValue("offset", 0));
                run(() -> admin.alterShareGroupOffsets(group, offsets).all().get(), "alter_offsets");
            }
            case "delete_offsets" ->
                run(() -> admin.deleteShareGroupOffsets(group, Set.of(a.str("topic"))).all().get(), "delete_offsets");
            case "delete" -> run(() -> admin.deleteShareGroups(List.of(group)).all().get(), "delete");
            default -> throw new IllegalArgumentException("unknown op " + a.str("op"));
        }
    }

    private interface Call {
        void run() throws Exception;
    }

    private static void run(Call call, String event) throws Exception {
        try {
            call.run();
            Out.emit(event, "ok", true);
        } catch (ExecutionException e) {
            Out.error(e.getCause());
        }
    }
}
