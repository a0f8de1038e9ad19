import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * The Debezium arm of the benchmark (bench/sections/debezium.ts): the embedded engine with the
 * Postgres connector and the outbox EventRouter SMT, its routed records sent to Kafka by an
 * idempotent KafkaProducer (acks=all), the way Debezium Server's Kafka sink does it: a batch
 * is sent, every record's acknowledgement awaited, and only then marked processed, so the
 * slot's position never passes a record Kafka does not have.
 *
 *   java -cp '.cache/debezium/classes:.cache/debezium/libs/*' DebeziumRunner key=value ...
 *
 * Arguments `producer.X=V` configure the producer (X=V); all others configure the engine.
 * Lines on stdout, JSON, every 200 ms and once more at the end:
 *   {"t":ms,"sent":n,"acked":n,"firstAck":ms,"lastAck":ms,"ackedAtFirst":n}
 * where times are wall-clock milliseconds with sub-millisecond precision, firstAck/lastAck
 * the first and the latest acknowledgement and ackedAtFirst how many records were acknowledged
 * within 1 ms of the first (the first batch's duration is not in [firstAck, lastAck]). SIGTERM stops it.
 */
public final class DebeziumRunner {
  private static final long START_NANOS = System.nanoTime();
  private static final double START_MS = System.currentTimeMillis();

  private static final AtomicLong sent = new AtomicLong();
  private static final AtomicLong acked = new AtomicLong();
  private static final AtomicLong ackedAtFirst = new AtomicLong();
  private static volatile double firstAck = 0;
  private static volatile double lastAck = 0;

  private static double now() {
    return START_MS + (System.nanoTime() - START_NANOS) / 1e6;
  }

  private static synchronized void report(String extra) {
    System.out.printf(
        "{\"t\":%.3f,\"sent\":%d,\"acked\":%d,\"firstAck\":%.3f,\"lastAck\":%.3f,\"ackedAtFirst\":%d%s}%n",
        now(), sent.get(), acked.get(), firstAck, lastAck, ackedAtFirst.get(), extra);
    System.out.flush();
  }

  private static synchronized void onAck() {
    double t = now();
    if (firstAck == 0) firstAck = t;
    if (t - firstAck < 1.0) ackedAtFirst.incrementAndGet();
    lastAck = t;
    acked.incrementAndGet();
  }

  private static byte[] bytes(Object o) {
    return o == null ? null : o.toString().getBytes(StandardCharsets.UTF_8);
  }

  public static void main(String[] args) throws Exception {
    Properties engine = new Properties();
    Properties producerConfig = new Properties();
    for (String arg : args) {
      int eq = arg.indexOf('=');
      String key = arg.substring(0, eq);
      String value = arg.substring(eq + 1);
      if (key.startsWith("producer.")) producerConfig.setProperty(key.substring("producer.".length()), value);
      else engine.setProperty(key, value);
    }
    producerConfig.setProperty("acks", "all");
    producerConfig.setProperty("enable.idempotence", "true");
    producerConfig.setProperty("key.serializer", ByteArraySerializer.class.getName());
    producerConfig.setProperty("value.serializer", ByteArraySerializer.class.getName());
    KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerConfig);

    AtomicReference<Exception> sendError = new AtomicReference<>();
    DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> sink = (records, committer) -> {
      CountDownLatch latch = new CountDownLatch(records.size());
      for (RecordChangeEvent<SourceRecord> r : records) {
        SourceRecord s = r.record();
        RecordHeaders headers = new RecordHeaders();
        for (Header h : s.headers()) headers.add(h.key(), bytes(h.value()));
        // EventRouter's record: key aggregateid, value the payload column (JSON text), the
        // event id as header "id"; written as their UTF-8 text (StringConverter's bytes).
        producer.send(new ProducerRecord<>(s.topic(), null, bytes(s.key()), bytes(s.value()), headers), (meta, error) -> {
          if (error != null) sendError.compareAndSet(null, error);
          else onAck();
          latch.countDown();
        });
        sent.incrementAndGet();
      }
      latch.await();
      if (sendError.get() != null) throw new RuntimeException("Kafka send failed", sendError.get());
      for (RecordChangeEvent<SourceRecord> r : records) committer.markProcessed(r);
      committer.markBatchFinished();
    };

    CountDownLatch finished = new CountDownLatch(1);
    AtomicReference<String> failure = new AtomicReference<>();
    DebeziumEngine<RecordChangeEvent<SourceRecord>> dbz = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
        .using(engine)
        .notifying(sink)
        .using((success, message, error) -> {
          if (!success) failure.set(message + (error == null ? "" : ": " + error));
          finished.countDown();
        })
        .build();

    ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor();
    ticker.scheduleAtFixedRate(() -> report(""), 200, 200, TimeUnit.MILLISECONDS);
    ExecutorService runner = Executors.newSingleThreadExecutor();
    runner.execute(dbz);

    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        dbz.close();
        finished.await(30, TimeUnit.SECONDS);
      } catch (Exception e) {
        System.err.println("DebeziumRunner: close failed: " + e);
      }
      producer.close();
      ticker.shutdownNow();
      report(",\"done\":true");
    }));

    finished.await();
    if (failure.get() != null) {
      System.err.println("DebeziumRunner: engine stopped: " + failure.get());
      Runtime.getRuntime().halt(1);
    }
  }
}
