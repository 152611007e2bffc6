import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Admin calls by `op` (see each case); every per-item outcome is an event, errors included
 * (as {"event": "error", "error": ExceptionName, ...}). The transaction, log-dir, election and
 * SCRAM calls live in KafkaAdminOps. With serve=true, one Admin serves every call read from
 * stdin (see Serve).
 */
public final class KafkaAdmin {
    public static void main(String[] argv) throws Exception {
        Args a = new Args(argv);
        try (Admin admin = Admin.create(a.kafkaProps())) {
            if (a.flag("serve", false)) {  // many calls on one Admin (Serve)
                Serve.lines(call -> {
                    if (!KafkaAdminOps.run(admin, call)) run(admin, call);
                });
            } else if (!KafkaAdminOps.run(admin, a)) {
                run(admin, a);
            }
        }
    }

    static void run(Admin admin, Args a) throws Exception {
        String op = a.str("op");
        switch (op) {
            case "create_topics": {
                List<NewTopic> topics = new ArrayList<>();
                for (String t : a.list("topics")) {
                    topics.add(new NewTopic(t, a.integer("partitions", 1), (short) a.integer("replication", 1)));
                }
                for (Map.Entry<String, KafkaFuture<Void>> e : admin.createTopics(topics).values().entrySet()) {
                    try {
                        e.getValue().get();
                        Out.emit("created", "topic", e.getKey());
                    } catch (Exception ex) {
                        Out.error(ex, "topic", e.getKey());
                    }
                }
                break;
            }
            case "describe_topics": {
                DescribeTopicsOptions options = new DescribeTopicsOptions()
                        .includeAuthorizedOperations(a.flag("authorized_operations", false));
                if (a.list("ids").length > 0) {
                    List<Uuid> ids = new ArrayList<>();
                    for (String id : a.list("ids")) ids.add(Uuid.fromString(id));
                    for (Map.Entry<Uuid, KafkaFuture<TopicDescription>> e :
                            admin.describeTopics(TopicCollection.ofTopicIds(ids), options).topicIdValues().entrySet()) {
                        try {
                            topic(e.getValue().get());
                        } catch (Exception ex) {
                            Out.error(ex, "id", e.getKey().toString());
                        }
                    }
                } else {
                    for (Map.Entry<String, KafkaFuture<TopicDescription>> e : admin.describeTopics(
                            TopicCollection.ofTopicNames(Arrays.asList(a.list("topics"))), options)
                            .topicNameValues().entrySet()) {
                        try {
                            topic(e.getValue().get());
                        } catch (Exception ex) {
                            Out.error(ex, "topic", e.getKey());
                        }
                    }
                }
                break;
            }
            case "list_topics": {
                org.apache.kafka.clients.admin.ListTopicsOptions options =
                        new org.apache.kafka.clients.admin.ListTopicsOptions().listInternal(a.flag("internal", false));
                Out.emit("topics", "names", new ArrayList<>(admin.listTopics(options).names().get()));
                break;
            }
            case "describe_cluster": {
                DescribeClusterResult r = admin.describeCluster(new DescribeClusterOptions()
                        .includeAuthorizedOperations(a.flag("authorized_operations", false)));
                List<Object> nodes = new ArrayList<>();
                for (org.apache.kafka.common.Node n : r.nodes().get()) nodes.add(n.id());
                Out.emit("cluster", "cluster_id", r.clusterId().get(), "controller", r.controller().get().id(),
                        "nodes", nodes, "authorized_operations", ops(r.authorizedOperations().get()));
                break;
            }
            case "describe_configs": {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.valueOf(a.str("type")), a.str("name"));
                try {
                    Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                    Map<String, Object> entries = new HashMap<>();
                    for (ConfigEntry e : config.entries()) {
                        entries.put(e.name(), Out.map("value", e.value(), "source", e.source().name(),
                                "read_only", e.isReadOnly(), "sensitive", e.isSensitive()));
                    }
                    Out.emit("configs", "entries", entries);
                } catch (Exception ex) {
                    Out.error(ex);
                }
                break;
            }
            case "incremental_alter_configs": {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.valueOf(a.str("type")), a.str("name"));
                List<AlterConfigOp> ops = new ArrayList<>();
                for (String kv : a.list("set")) {
                    int colon = kv.indexOf(':');
                    ops.add(new AlterConfigOp(new ConfigEntry(kv.substring(0, colon), kv.substring(colon + 1)),
                            AlterConfigOp.OpType.SET));
                }
                for (String k : a.list("delete")) {
                    ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
                }
                try {
                    admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
                    Out.emit("altered");
                } catch (Exception ex) {
                    Out.error(ex);
                }
                break;
            }
            case "delete_groups": {
                for (Map.Entry<String, KafkaFuture<Void>> e :
                        admin.deleteConsumerGroups(Arrays.asList(a.list("groups"))).deletedGroups().entrySet()) {
                    try {
                        e.getValue().get();
                        Out.emit("deleted", "group", e.getKey());
                    } catch (Exception ex) {
                        Out.error(ex, "group", e.getKey());
                    }
                }
                break;
            }
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    static List<Object> ops(Set<AclOperation> operations) {
        if (operations == null) return null;
        List<Object> names = new ArrayList<>();
        for (AclOperation o : operations) names.add(o.name());
        names.sort(null);
        return names;
    }

    private static void topic(TopicDescription d) {
        List<Object> partitions = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            partitions.add(Out.map("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id()));
        }
        Out.emit("topic", "name", d.name(), "id", d.topicId().toString(), "internal", d.isInternal(),
                "partitions", partitions, "authorized_operations", ops(d.authorizedOperations()));
    }
}
