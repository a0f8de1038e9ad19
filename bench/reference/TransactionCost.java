import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Kafka's own producer doing what the relay's exactly-once units do at a steady rate, and
 * the same without transactions: the reference bench section 16 sets the relay's
 * exactly-once cost against (docs/benchmarks.md). Rows arrive on a Poisson schedule at
 * RATE a second for SECONDS, each to one of UNITS unit threads at random (as keys hash to
 * shards). Each unit, like a relay worker, takes every row that waits (at most 500) and
 * publishes them before it takes the next:
 * - transactions: one producer per unit under its own transactional.id; begin, send the
 *   rows, sendOffsetsToTransaction (a progress record: an offset with metadata for a
 *   consumer group of the unit, the relay's progress), commitTransaction. A row counts as
 *   delivered when commitTransaction returns: a read_committed reader sees nothing before.
 * - acks: one idempotent producer per unit (acks=all); a row counts when its send's
 *   callback reports Kafka's acknowledgement.
 * No Postgres: arrival → delivered is what Kafka's own client pays for the mode, per row.
 * Both modes send with linger.ms 0.
 * Usage: java TransactionCost BROKERS TOPIC RATE SECONDS MODE UNITS ID_PREFIX PAYLOAD_BYTES [RETRY_BACKOFF_MS]
 * Prints one JSON line: the client's version, the mode, rows, transactions committed,
 * and each row's arrival → delivered in ms.
 */
public class TransactionCost {
  record Arrival(long atNanos, byte[] key) {}

  public static void main(String[] args) throws Exception {
    String brokers = args[0];
    String topic = args[1];
    double rate = Double.parseDouble(args[2]);
    int seconds = Integer.parseInt(args[3]);
    boolean transactions = switch (args[4]) {
      case "transactions" -> true;
      case "acks" -> false;
      default -> throw new IllegalArgumentException("mode must be transactions or acks: " + args[4]);
    };
    int units = Integer.parseInt(args[5]);
    String prefix = args[6];
    byte[] payload = new byte[Integer.parseInt(args[7])];
    // Kafka's default is 100 ms; the relay's units retry after 10 (src/relay/transactionRetry.ts).
    String retryBackoffMs = args.length > 8 ? args[8] : "100";
    Semaphore slots = new Semaphore(args.length > 9 ? Integer.parseInt(args[9]) : units);
    Arrays.fill(payload, (byte) 'x');

    List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
    List<BlockingQueue<Arrival>> queues = new ArrayList<>();
    for (int u = 0; u < units; u++) {
      Properties p = new Properties();
      p.put("bootstrap.servers", brokers);
      p.put("acks", "all");
      p.put("enable.idempotence", "true");
      p.put("linger.ms", "0");
      p.put("retry.backoff.ms", retryBackoffMs);
      p.put("key.serializer", ByteArraySerializer.class.getName());
      p.put("value.serializer", ByteArraySerializer.class.getName());
      if (transactions) p.put("transactional.id", prefix + "-unit-" + u);
      KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
      if (transactions) producer.initTransactions();
      producers.add(producer);
      queues.add(new LinkedBlockingQueue<>());
    }

    long[] latenciesNanos = new long[(int) (rate * seconds * 2) + 1000];
    AtomicLong rows = new AtomicLong();
    AtomicLong committed = new AtomicLong();
    Object lock = new Object();
    int[] filled = {0};
    // One round of each unit before the clock starts: connections, metadata, the coordinator.
    for (int u = 0; u < units; u++) publish(producers.get(u), topic, List.of(new Arrival(System.nanoTime(), "warm-up".getBytes())), payload, transactions, prefix, u, 0).get();
    long endNanos = System.nanoTime() + seconds * 1_000_000_000L;

    List<Thread> threads = new ArrayList<>();
    for (int u = 0; u < units; u++) {
      final int unit = u;
      Thread t = new Thread(() -> {
        long sequence = 1;
        try {
          while (true) {
            Arrival first = queues.get(unit).poll(100, TimeUnit.MILLISECONDS);
            if (first == null) {
              if (System.nanoTime() > endNanos + 1_000_000_000L) return;
              continue;
            }
            List<Arrival> batch = new ArrayList<>();
            batch.add(first);
            slots.acquire();
            long[] doneNanos;
            try {
              queues.get(unit).drainTo(batch, 499);
              doneNanos = publish(producers.get(unit), topic, batch, payload, transactions, prefix, unit, sequence++).get();
            } finally {
              slots.release();
            }
            if (transactions) committed.incrementAndGet();
            synchronized (lock) {
              for (int i = 0; i < batch.size(); i++) latenciesNanos[filled[0]++] = doneNanos[i] - batch.get(i).atNanos();
            }
            rows.addAndGet(batch.size());
          }
        } catch (Exception e) {
          e.printStackTrace();
          System.exit(2);
        }
      });
      t.start();
      threads.add(t);
    }

    // The arrivals: exponential gaps at the offered rate, on time as far as the clock allows.
    Random random = new Random(42);
    long next = System.nanoTime();
    long offered = 0;
    while (next < endNanos) {
      long wait = next - System.nanoTime();
      if (wait > 0) LockSupport.parkNanos(wait);
      byte[] key = ("key-" + (1 + random.nextInt(10_000))).getBytes();
      queues.get(random.nextInt(units)).add(new Arrival(System.nanoTime(), key));
      offered++;
      next += (long) (-Math.log(1 - random.nextDouble()) / rate * 1e9);
    }
    for (Thread t : threads) t.join();
    for (KafkaProducer<byte[], byte[]> producer : producers) producer.close();
    if (rows.get() != offered) throw new IllegalStateException("published " + rows.get() + " of " + offered + " rows");

    StringBuilder out = new StringBuilder();
    out.append("{\"client\":\"kafka-clients ").append(AppInfoParser.getVersion()).append("\",\"mode\":\"").append(transactions ? "transactions" : "acks");
    out.append("\",\"retryBackoffMs\":").append(retryBackoffMs).append(",\"units\":").append(units).append(",\"rows\":").append(rows.get()).append(",\"transactions\":").append(committed.get());
    out.append(",\"latenciesMs\":[");
    for (int i = 0; i < filled[0]; i++) out.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.3f", latenciesNanos[i] / 1e6));
    out.append("]}");
    System.out.println(out);
  }

  /** Publish one unit's rows; completes with when each was delivered (see the class comment). */
  static CompletableFuture<long[]> publish(KafkaProducer<byte[], byte[]> producer, String topic, List<Arrival> batch, byte[] payload, boolean transactions, String prefix, int unit, long sequence) {
    long[] done = new long[batch.size()];
    if (transactions) {
      producer.beginTransaction();
      for (Arrival a : batch) producer.send(new ProducerRecord<>(topic, a.key(), payload));
      producer.sendOffsetsToTransaction(
          Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(sequence, "v1:progress-" + sequence)),
          new ConsumerGroupMetadata(prefix + "-progress-" + unit));
      producer.commitTransaction();
      Arrays.fill(done, System.nanoTime());
      return CompletableFuture.completedFuture(done);
    }
    CompletableFuture<long[]> all = new CompletableFuture<>();
    AtomicLong left = new AtomicLong(batch.size());
    for (int i = 0; i < batch.size(); i++) {
      final int index = i;
      producer.send(new ProducerRecord<>(topic, batch.get(i).key(), payload), (metadata, error) -> {
        if (error != null) {
          all.completeExceptionally(error);
          return;
        }
        done[index] = System.nanoTime();
        if (left.decrementAndGet() == 0) all.complete(done);
      });
    }
    return all;
  }
}
