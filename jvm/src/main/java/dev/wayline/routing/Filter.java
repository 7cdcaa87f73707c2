package dev.wayline.routing;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntPredicate;
import org.apache.spark.sql.Row;

/**
 * A subscription's content filter, as wayline.registry.filter parsed it and
 * wayline.delivery.routing_table wrote it; {@link #matches} gives the answers of the Python
 * evaluator there (wayline.registry.filter.evaluate), which tests/pipelines/test_matching.py
 * holds it to.
 */
interface Filter {
  boolean matches(Row event);

  /** One node: {"and": [...]}, {"or": [...]}, {"not": f}, {"exists": path},
   * {"compare": op, "path": path, "value": v}, {"in": path, "values": [v, ...]} or
   * {"affix": "$prefix" | "$suffix", "path": path, "text": s}. */
  static Filter read(JsonNode node) {
    if (node.has("and")) {
      List<Filter> items = all(node.get("and"));
      return event -> {
        for (Filter item : items) {
          if (!item.matches(event)) {
            return false;
          }
        }
        return true;
      };
    }
    if (node.has("or")) {
      List<Filter> items = all(node.get("or"));
      return event -> {
        for (Filter item : items) {
          if (item.matches(event)) {
            return true;
          }
        }
        return false;
      };
    }
    if (node.has("not")) {
      Filter item = read(node.get("not"));
      return event -> !item.matches(event);
    }
    if (node.has("exists")) {
      FieldPath path = FieldPath.read(node.get("exists"));
      return event -> path.find(event).kind() != Found.Kind.MISSING;
    }
    if (node.has("in")) {
      FieldPath path = FieldPath.read(node.get("in"));
      List<Value> values = new ArrayList<>();
      node.get("values").forEach(value -> values.add(Value.read(value)));
      return event -> {
        Found found = path.find(event);
        for (Value value : values) {
          if (value.equalTo(found)) {
            return true;
          }
        }
        return false;
      };
    }
    if (node.has("affix")) {
      FieldPath path = FieldPath.read(node.get("path"));
      String text = node.get("text").asText();
      boolean prefix = node.get("affix").asText().equals("$prefix");
      return event -> {
        Found found = path.find(event);
        return found.kind() == Found.Kind.STRING
            && (prefix ? found.string().startsWith(text) : found.string().endsWith(text));
      };
    }
    if (node.has("compare")) {
      return compare(node.get("compare").asText(), FieldPath.read(node.get("path")), Value.read(node.get("value")));
    }
    throw new IllegalArgumentException("unknown filter node in the routing table: " + node);
  }

  private static Filter compare(String op, FieldPath path, Value value) {
    if (op.equals("$eq")) {
      return event -> value.equalTo(path.find(event));
    }
    IntPredicate holds;
    switch (op) {
      case "$gt":
        holds = sign -> sign > 0;
        break;
      case "$gte":
        holds = sign -> sign >= 0;
        break;
      case "$lt":
        holds = sign -> sign < 0;
        break;
      case "$lte":
        holds = sign -> sign <= 0;
        break;
      default:
        throw new IllegalArgumentException("unknown comparison in the routing table: " + op);
    }
    return event -> {
      Found found = path.find(event);
      return found.kind() == value.kind() && holds.test(value.order(found));
    };
  }

  private static List<Filter> all(JsonNode items) {
    List<Filter> read = new ArrayList<>();
    items.forEach(item -> read.add(read(item)));
    return List.copyOf(read);
  }
}
