package dev.wayline.routing;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;

/**
 * {@code wayline_routes(folder, version, event)}: the routes of every subscription that
 * delivers {@code event}, and the registry version they come from, as
 * {@code struct<version: bigint, routes: array<struct<subscription_id, endpoint_id, mode,
 * max_count, max_wait_ms>>>}.
 *
 * <p>With {@code version} < 0 it routes with the table {@code folder}'s CURRENT names, read
 * again within a second of a change: a long-running real-time batch follows the registry with
 * no new plan. Registered by wayline.pipelines.matching.
 */
public final class Routes implements UDF3<String, Long, Row, Row> {
  private static final long serialVersionUID = 1L;

  @Override
  public Row call(String folder, Long version, Row event) {
    RoutingTable table = version < 0 ? TableSource.followed(folder) : TableSource.pinned(folder, version);
    return RowFactory.create(table.version, table.routes(event));
  }
}
