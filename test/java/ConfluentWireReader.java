import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import com.google.protobuf.util.JsonFormat;
import com.squareup.wire.schema.internal.parser.ProtoFileElement;
import com.squareup.wire.schema.internal.parser.ProtoParser;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Conversions;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.everit.json.schema.ValidationException;
import org.everit.json.schema.loader.SchemaLoader;
import org.json.JSONObject;
import org.json.JSONTokener;

/**
 * Reads values in Confluent's schema-registry wire format with the reference libraries, so
 * that the tests prove what the relay writes is decodable by more than our own code:
 * Apache Avro's GenericDatumReader, protobuf-java's DynamicMessage, and for JSON Schema
 * Jackson plus the everit validator. Each value's writer schema is fetched by id from the
 * registry's Confluent-compatible API, as a consumer's deserializer would.
 *
 * Usage: java ConfluentWireReader REGISTRY_URL   (e.g. http://127.0.0.1:PORT/apis/ccompat/v7)
 * stdin: one base64 value per line. stdout: one JSON line per value, in order:
 *   {"schemaId":N,"schemaType":"AVRO"|"PROTOBUF"|"JSON","messageIndexes":[...],"messageType":"pkg.Name","value":...}
 * (messageIndexes and messageType for Protobuf only; its value is protobuf-java's JSON mapping with
 * the .proto field names and fields at their default printed too, so 64-bit integers are strings),
 * or {"error":"..."} for a value that cannot be read (the rest are still read).
 *
 * Strict on purpose: trailing bytes after an Avro record, fields a Protobuf schema does not
 * know, and JSON that fails its schema are errors, since each means the writer and the
 * schema it named disagree.
 */
public class ConfluentWireReader {
  private static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
  private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  private static final JsonFormat.Printer PROTO_JSON =
      JsonFormat.printer().preservingProtoFieldNames().alwaysPrintFieldsWithNoPresence().omittingInsignificantWhitespace();

  /** A registered schema, parsed once per id. */
  private record Writer(String type, Schema avro, FileDescriptor proto, org.everit.json.schema.Schema json) {}

  private static String registry;
  private static final Map<Integer, Writer> WRITERS = new HashMap<>();

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: java ConfluentWireReader REGISTRY_URL < base64-lines");
      System.exit(2);
    }
    registry = args[0].replaceAll("/+$", "");
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      if (line.isBlank()) continue;
      ObjectNode result;
      try {
        result = read(Base64.getDecoder().decode(line.trim()));
      } catch (Exception | LinkageError e) {
        result = JSON.createObjectNode().put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
      }
      out.write(JSON.writeValueAsString(result));
      out.write('\n');
    }
    out.flush();
  }

  static ObjectNode read(byte[] bytes) throws Exception {
    if (bytes.length < 5) throw new IllegalArgumentException(bytes.length + " bytes: shorter than the 5-byte header");
    if (bytes[0] != 0) throw new IllegalArgumentException("magic byte " + bytes[0] + ", not 0");
    ByteBuffer buffer = ByteBuffer.wrap(bytes);
    buffer.get();
    int id = buffer.getInt();
    Writer writer = writer(id);
    ObjectNode result = JSON.createObjectNode().put("schemaId", id).put("schemaType", writer.type);
    switch (writer.type) {
      case "AVRO" -> result.set("value", avro(writer.avro, bytes, 5));
      case "PROTOBUF" -> {
        CodedInputStream input = CodedInputStream.newInstance(bytes, 5, bytes.length - 5);
        List<Integer> indexes = messageIndexes(input);
        ArrayNode list = result.putArray("messageIndexes");
        indexes.forEach(list::add);
        Descriptor type = messageType(writer.proto, indexes);
        result.put("messageType", type.getFullName());
        result.set("value", protobuf(type, input));
      }
      case "JSON" -> result.set("value", json(writer.json, new String(bytes, 5, bytes.length - 5, StandardCharsets.UTF_8)));
      default -> throw new IllegalStateException("schema type " + writer.type);
    }
    return result;
  }

  static JsonNode avro(Schema schema, byte[] bytes, int offset) throws Exception {
    BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(bytes, offset, bytes.length - offset, null);
    // Decimals read as BigDecimal (Avro's own conversion), rendered as JSON numbers.
    GenericData data = new GenericData();
    data.addLogicalTypeConversion(new Conversions.DecimalConversion());
    Object datum = new GenericDatumReader<Object>(schema, schema, data).read(null, decoder);
    if (!decoder.isEnd()) throw new IllegalArgumentException("trailing bytes after the Avro datum");
    // GenericData's rendering is JSON with unions unwrapped (the value as a reader sees it),
    // unlike Avro's JSON encoding, which wraps each union value in {"type": value}.
    return JSON.readTree(data.toString(datum));
  }

  /**
   * The message-index path Confluent's Protobuf serializer writes after the header: zigzag
   * varints, a count and then that many indexes; a count of 0 stands for [0], the file's first message.
   */
  static List<Integer> messageIndexes(CodedInputStream input) throws Exception {
    int count = input.readSInt32();
    if (count < 0) throw new IllegalArgumentException("negative message-index count " + count);
    List<Integer> indexes = new ArrayList<>();
    if (count == 0) indexes.add(0);
    for (int i = 0; i < count; i++) indexes.add(input.readSInt32());
    return indexes;
  }

  /** The message an index path names: the first index among the file's messages, each next among the nested ones. */
  static Descriptor messageType(FileDescriptor file, List<Integer> indexes) {
    List<Descriptor> level = file.getMessageTypes();
    Descriptor type = null;
    for (int index : indexes) {
      if (index < 0 || index >= level.size()) throw new IllegalArgumentException("message index path " + indexes + " names no message of the schema");
      type = level.get(index);
      level = type.getNestedTypes();
    }
    return type;
  }

  static JsonNode protobuf(Descriptor type, CodedInputStream input) throws Exception {
    DynamicMessage message = DynamicMessage.parseFrom(type, input);
    String unknown = unknownFields(message, type.getFullName());
    if (unknown != null) throw new IllegalArgumentException("fields " + type.getFullName() + " does not declare: " + unknown);
    return JSON.readTree(PROTO_JSON.print(message));
  }

  /** Where a message (or one inside it) carries fields its descriptor does not name; null when none does. */
  static String unknownFields(Message message, String path) {
    if (!message.getUnknownFields().asMap().isEmpty()) return path + " " + message.getUnknownFields().asMap().keySet();
    for (Map.Entry<FieldDescriptor, Object> field : message.getAllFields().entrySet()) {
      if (field.getKey().getJavaType() != FieldDescriptor.JavaType.MESSAGE) continue;
      List<?> values = field.getKey().isRepeated() ? (List<?>) field.getValue() : List.of(field.getValue());
      for (Object v : values) {
        String found = unknownFields((Message) v, path + "." + field.getKey().getName());
        if (found != null) return found;
      }
    }
    return null;
  }

  static JsonNode json(org.everit.json.schema.Schema schema, String text) throws Exception {
    JsonNode value = JSON.readTree(text);
    try {
      schema.validate(new JSONTokener(text).nextValue());
    } catch (ValidationException e) {
      throw new IllegalArgumentException("does not match its JSON schema: " + String.join("; ", e.getAllMessages()));
    }
    return value;
  }

  static Writer writer(int id) throws Exception {
    Writer cached = WRITERS.get(id);
    if (cached != null) return cached;
    HttpRequest request = HttpRequest.newBuilder(URI.create(registry + "/schemas/ids/" + id)).timeout(Duration.ofSeconds(30)).GET().build();
    HttpResponse<String> response;
    try {
      response = HTTP.send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    } catch (java.io.IOException e) {
      // java.net.http's ConnectException has no message of its own; its cause says why.
      throw new java.io.IOException("schema id " + id + ": " + request.uri() + " not reachable: " + (e.getCause() != null ? e.getCause() : e), e);
    }
    if (response.statusCode() != 200) throw new IllegalArgumentException("schema id " + id + ": HTTP " + response.statusCode() + " " + response.body());
    JsonNode body = JSON.readTree(response.body());
    String text = body.path("schema").asText();
    // Confluent leaves schemaType out for Avro, the original and default type.
    String type = body.path("schemaType").asText("AVRO");
    if (body.path("references").size() > 0) throw new UnsupportedOperationException("schema id " + id + " has references, which this reader does not resolve");
    Writer writer =
        switch (type) {
          case "AVRO" -> new Writer(type, new Schema.Parser().parse(text), null, null);
          case "PROTOBUF" -> new Writer(type, null, protoFile(text), null);
          case "JSON" -> new Writer(type, null, null, jsonSchema(new JSONObject(text)));
          default -> throw new UnsupportedOperationException("schema id " + id + ": schema type " + type);
        };
    WRITERS.put(id, writer);
    return writer;
  }

  /** The registry's own parsing of a .proto text into a descriptor (with the well-known types to import). */
  static FileDescriptor protoFile(String text) throws Exception {
    ProtoFileElement element = ProtoParser.Companion.parse(FileDescriptorUtils.DEFAULT_LOCATION, text);
    return FileDescriptorUtils.protoFileToFileDescriptor(element);
  }

  /** Draft 7 when the schema names no draft, as Confluent's JSON Schema serializer assumes. */
  static org.everit.json.schema.Schema jsonSchema(JSONObject schema) {
    SchemaLoader.SchemaLoaderBuilder loader = SchemaLoader.builder().schemaJson(schema);
    if (!schema.has("$schema")) loader.draftV7Support();
    return loader.build().load().build();
  }
}
