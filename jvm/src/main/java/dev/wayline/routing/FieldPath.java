package dev.wayline.routing;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantUtil;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * An envelope attribute, or a path into the event's {@code data}: keys (String) open objects
 * and indexes (Integer) open arrays, nothing else (wayline.registry.filter's language).
 */
record FieldPath(int column, List<Object> steps) {
  /** The event's columns, in the order of the struct the routing function is given
   * (wayline.pipelines.matching.EVENT_FIELDS); time in epoch microseconds, data a VARIANT. */
  static final List<String> EVENT_FIELDS =
      List.of("id", "source", "type", "subject", "tenantid", "subtenantid", "time", "data");
  static final int TYPE = EVENT_FIELDS.indexOf("type");
  static final int TENANT = EVENT_FIELDS.indexOf("tenantid");
  static final int SUBTENANT = EVENT_FIELDS.indexOf("subtenantid");
  private static final int TIME = EVENT_FIELDS.indexOf("time");
  private static final int DATA = EVENT_FIELDS.indexOf("data");

  /** {"field": name, "steps": ["key", 0, ...]}. */
  static FieldPath read(JsonNode node) {
    int column = EVENT_FIELDS.indexOf(node.get("field").asText());
    if (column < 0) {
      throw new IllegalArgumentException("unknown field in the routing table: " + node);
    }
    List<Object> steps = new java.util.ArrayList<>();
    for (JsonNode step : node.path("steps")) {
      steps.add(step.isInt() ? (Object) step.asInt() : step.asText());
    }
    return new FieldPath(column, List.copyOf(steps));
  }

  Found find(Row event) {
    if (event.isNullAt(column)) {
      return Found.MISSING;
    }
    if (column == TIME) {
      return Found.time(event.getLong(column));
    }
    if (column != DATA) {
      return Found.string(event.getString(column));
    }
    VariantVal data = (VariantVal) event.get(column);
    Variant node = new Variant(data.getValue(), data.getMetadata());
    for (Object step : steps) {
      node = step instanceof Integer index ? element(node, index) : member(node, (String) step);
      if (node == null) {
        return Found.MISSING;
      }
    }
    return Found.of(node);
  }

  private static Variant element(Variant node, int index) {
    return node.getType() == VariantUtil.Type.ARRAY && index < node.arraySize() ? node.getElementAtIndex(index) : null;
  }

  private static Variant member(Variant node, String key) {
    return node.getType() == VariantUtil.Type.OBJECT ? node.getFieldByKey(key) : null;
  }
}
