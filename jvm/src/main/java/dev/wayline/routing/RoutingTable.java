package dev.wayline.routing;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * One registry version's routes, as wayline.delivery.routing_table writes them: per match
 * key (event type, tenant or "*", sub-tenant or "*"), the subscriptions it covers, each with
 * its route and its filter.
 */
final class RoutingTable {
  private static final String ANY = "*";

  private record Candidate(Row route, Filter filter) {}

  final long version;
  private final Map<String, Candidate[]> byKey;

  private RoutingTable(long version, Map<String, Candidate[]> byKey) {
    this.version = version;
    this.byKey = byKey;
  }

  static RoutingTable read(JsonNode document) {
    Map<Integer, Filter> filters = new HashMap<>();
    for (Map.Entry<String, JsonNode> entry : document.get("filters").properties()) {
      filters.put(Integer.valueOf(entry.getKey()), Filter.read(entry.getValue()));
    }
    List<Candidate> subscriptions = new ArrayList<>();
    for (JsonNode s : document.get("subscriptions")) {
      Row route = RowFactory.create(s.get("id").asText(), s.get("endpoint_id").asText(), s.get("mode").asText(),
          s.get("max_count").asInt(), s.get("max_wait_ms").asInt());
      subscriptions.add(new Candidate(route, s.get("filter").isNull() ? null : filter(filters, s.get("filter").asInt())));
    }
    Map<String, Candidate[]> byKey = new HashMap<>();
    for (JsonNode entry : document.get("keys")) {
      JsonNode covered = entry.get(3);
      Candidate[] candidates = new Candidate[covered.size()];
      for (int i = 0; i < candidates.length; i++) {
        candidates[i] = subscriptions.get(covered.get(i).asInt());
      }
      byKey.put(key(entry.get(0).asText(), entry.get(1).asText(), entry.get(2).asText()), candidates);
    }
    return new RoutingTable(document.get("version").asLong(), byKey);
  }

  private static Filter filter(Map<Integer, Filter> filters, int id) {
    Filter found = filters.get(id);
    if (found == null) {
      throw new IllegalArgumentException("the routing table names filter " + id + " and does not have it");
    }
    return found;
  }

  /** The routes of every subscription that delivers {@code event} (its filter passed), the
   * narrowest match key's first, each key's in the order the table lists them. */
  List<Row> routes(Row event) {
    List<Row> found = new ArrayList<>(2);
    if (event.isNullAt(FieldPath.TYPE)) {
      return found;
    }
    String type = event.getString(FieldPath.TYPE);
    if (!event.isNullAt(FieldPath.TENANT)) {
      String tenant = event.getString(FieldPath.TENANT);
      if (!event.isNullAt(FieldPath.SUBTENANT)) {
        add(found, key(type, tenant, event.getString(FieldPath.SUBTENANT)), event);
      }
      add(found, key(type, tenant, ANY), event);
    }
    add(found, key(type, ANY, ANY), event);
    return found;
  }

  private void add(List<Row> found, String key, Row event) {
    Candidate[] candidates = byKey.get(key);
    if (candidates == null) {
      return;
    }
    for (Candidate candidate : candidates) {
      if (candidate.filter() == null || candidate.filter().matches(event)) {
        found.add(candidate.route());
      }
    }
  }

  private static String key(String type, String tenant, String subtenant) {
    return type + '\u0000' + tenant + '\u0000' + subtenant;
  }
}
