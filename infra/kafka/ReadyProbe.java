// Readiness probe for the local seqflow Kafka clusters (used by infra/local/stack.sh).
//
// "Ready" means a client can actually use the cluster, not that the process is up:
//   1. (optional) at least --expect-brokers brokers are registered and unfenced;
//   2. topic __seqflow_ready exists (created with --rf / --min-isr if missing);
//   3. one record is produced with acks=all + idempotence inside a transaction
//      (this also creates/warms __transaction_state) and committed;
//   4. the record is read back with isolation.level=read_committed and its offset
//      committed for group __seqflow_ready (this creates/warms __consumer_offsets);
//   5. (optional, --internal-segment-bytes N) the segment.bytes of __consumer_offsets and
//      __transaction_state is N, set if it is not (a coordinator that takes over a partition
//      of them replays it from its last compacted segment: see stack.sh);
//   6. (optional, --full-isr) no partition of any topic is under-replicated or leaderless.
// The whole sequence is retried until --timeout seconds have passed.
// Exit code 0 = ready, 1 = not ready before the deadline, 2 = usage error.
//
// Compiled by stack.sh with: javac -cp '.data/kafka/libs/*' -d .data/kafka/probe ReadyProbe.java

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ReadyProbe {
    private static final String TOPIC = "__seqflow_ready";
    private static final String GROUP = "__seqflow_ready";

    private String bootstrap = "127.0.0.1:19092";
    private int rf = 1;
    private int minIsr = 1;
    private int timeoutSec = 120;
    private int expectBrokers = 0;
    private boolean fullIsr = false;
    private long internalSegmentBytes = 0;
    private boolean txn = true;
    private boolean quiet = false;
    private long deadlineNanos;

    public static void main(String[] args) {
        ReadyProbe p = new ReadyProbe();
        try {
            p.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("ready-probe: " + e.getMessage());
            System.err.println("usage: ReadyProbe --bootstrap host:port[,..] [--rf N] [--min-isr N] [--timeout SEC]"
                    + " [--expect-brokers N] [--internal-segment-bytes N] [--full-isr] [--no-txn] [--quiet]");
            System.exit(2);
        }
        System.exit(p.run());
    }

    private void parse(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--bootstrap": bootstrap = need(args, ++i, a); break;
                case "--rf": rf = Integer.parseInt(need(args, ++i, a)); break;
                case "--min-isr": minIsr = Integer.parseInt(need(args, ++i, a)); break;
                case "--timeout": timeoutSec = Integer.parseInt(need(args, ++i, a)); break;
                case "--expect-brokers": expectBrokers = Integer.parseInt(need(args, ++i, a)); break;
                case "--internal-segment-bytes": internalSegmentBytes = Long.parseLong(need(args, ++i, a)); break;
                case "--full-isr": fullIsr = true; break;
                case "--no-txn": txn = false; break;
                case "--quiet": quiet = true; break;
                default: throw new IllegalArgumentException("unknown argument " + a);
            }
        }
    }

    private static String need(String[] args, int i, String flag) {
        if (i >= args.length) throw new IllegalArgumentException(flag + " needs a value");
        return args[i];
    }

    private int run() {
        long start = System.nanoTime();
        deadlineNanos = start + TimeUnit.SECONDS.toNanos(timeoutSec);
        String last = null;
        int attempts = 0;
        while (true) {
            attempts++;
            try {
                String result = probeOnce();
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                if (!quiet) {
                    System.out.println("ready-probe: " + bootstrap + " ready (" + result + ", "
                            + attempts + " attempt(s), " + ms + " ms)");
                }
                return 0;
            } catch (Exception e) {
                String msg = describe(e);
                if (!quiet && !msg.equals(last)) System.err.println("ready-probe: not ready yet: " + msg);
                last = msg;
            }
            if (remainingMs() <= 1000) {
                System.err.println("ready-probe: " + bootstrap + " NOT ready after " + timeoutSec + "s: " + last);
                return 1;
            }
            sleep(1000);
        }
    }

    private long remainingMs() {
        return TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime());
    }

    /** Per-step timeout: bounded by the overall deadline. */
    private long stepMs(long max) {
        return Math.max(1000, Math.min(max, remainingMs()));
    }

    private Properties common(String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", "10000");
        p.put("reconnect.backoff.max.ms", "1000");
        p.put("retry.backoff.max.ms", "1000");
        return p;
    }

    private String probeOnce() throws Exception {
        StringBuilder out = new StringBuilder();
        Properties ap = common("seqflow-ready-probe-admin");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(stepMs(20000)));
        try (Admin admin = Admin.create(ap)) {
            if (expectBrokers > 0) {
                var nodes = admin.describeCluster().nodes().get(stepMs(15000), TimeUnit.MILLISECONDS);
                if (nodes.size() < expectBrokers) {
                    List<Integer> ids = new ArrayList<>();
                    for (Node n : nodes) ids.add(n.id());
                    throw new IllegalStateException(nodes.size() + "/" + expectBrokers + " brokers alive " + ids);
                }
                out.append(nodes.size()).append(" brokers, ");
            }
            try {
                NewTopic t = new NewTopic(TOPIC, 1, (short) rf)
                        .configs(Map.of("min.insync.replicas", String.valueOf(minIsr)));
                admin.createTopics(List.of(t)).all().get(stepMs(20000), TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }

        String nonce = UUID.randomUUID().toString();
        TopicPartition tp = new TopicPartition(TOPIC, 0);
        long offset;
        Properties pp = common("seqflow-ready-probe-producer");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(stepMs(20000)));
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(Math.max(11000, stepMs(30000))));
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        if (txn) {
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "__seqflow_ready_probe");
            pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            try {
                if (txn) {
                    producer.initTransactions();
                    producer.beginTransaction();
                }
                var fut = producer.send(new ProducerRecord<>(TOPIC, 0, "probe", nonce));
                if (txn) producer.commitTransaction();
                RecordMetadata md = fut.get(stepMs(30000), TimeUnit.MILLISECONDS);
                offset = md.offset();
            } finally {
                producer.close(Duration.ofSeconds(2));
            }
        }
        out.append(txn ? "transactional " : "").append("produce@").append(offset);

        Properties cp = common("seqflow-ready-probe-consumer");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(stepMs(20000)));
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(Set.of(tp));
            consumer.seek(tp, offset);
            long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(stepMs(20000));
            boolean found = false;
            while (!found && System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    if (nonce.equals(r.value())) {
                        found = true;
                        break;
                    }
                }
            }
            if (!found) throw new IllegalStateException("produced record at offset " + offset + " not read back");
            // position() is past the transaction marker as well
            long pos = consumer.position(tp, Duration.ofMillis(stepMs(20000)));
            consumer.commitSync(Map.of(tp, new OffsetAndMetadata(pos)), Duration.ofMillis(stepMs(20000)));
        }
        out.append(", read_committed consume+commit ok");

        if (internalSegmentBytes > 0) {
            try (Admin admin = Admin.create(ap)) {
                List<String> topics = txn ? List.of("__consumer_offsets", "__transaction_state") : List.of("__consumer_offsets");
                int changed = 0;
                for (String topic : topics) {
                    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                    Config c = admin.describeConfigs(List.of(r)).all().get(stepMs(15000), TimeUnit.MILLISECONDS).get(r);
                    ConfigEntry e = c.get("segment.bytes");
                    if (e != null && String.valueOf(internalSegmentBytes).equals(e.value())) continue;
                    AlterConfigOp op = new AlterConfigOp(new ConfigEntry("segment.bytes", String.valueOf(internalSegmentBytes)),
                            AlterConfigOp.OpType.SET);
                    admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get(stepMs(15000), TimeUnit.MILLISECONDS);
                    changed++;
                }
                out.append(", internal topics' segment.bytes ").append(internalSegmentBytes)
                        .append(changed > 0 ? " (set on " + changed + ")" : "");
            }
        }

        if (fullIsr) {
            try (Admin admin = Admin.create(ap)) {
                Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(true)).names()
                        .get(stepMs(15000), TimeUnit.MILLISECONDS);
                Map<String, TopicDescription> d = admin.describeTopics(names).allTopicNames()
                        .get(stepMs(15000), TimeUnit.MILLISECONDS);
                int bad = 0, total = 0;
                String example = null;
                for (TopicDescription td : d.values()) {
                    for (TopicPartitionInfo pi : td.partitions()) {
                        total++;
                        if (pi.leader() == null || pi.leader().isEmpty() || pi.isr().size() < pi.replicas().size()) {
                            bad++;
                            if (example == null) example = td.name() + "-" + pi.partition()
                                    + " isr=" + pi.isr().size() + "/" + pi.replicas().size();
                        }
                    }
                }
                if (bad > 0) throw new IllegalStateException(bad + "/" + total
                        + " partitions under-replicated or leaderless (e.g. " + example + ")");
                out.append(", ").append(total).append(" partitions fully in sync");
            }
        }
        return out.toString();
    }

    private static String describe(Throwable e) {
        while ((e instanceof ExecutionException || e.getClass().getName().endsWith("KafkaException"))
                && e.getCause() != null) {
            e = e.getCause();
        }
        String m = e.getMessage();
        return e.getClass().getSimpleName() + (m == null ? "" : ": " + m.replace('\n', ' '));
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
