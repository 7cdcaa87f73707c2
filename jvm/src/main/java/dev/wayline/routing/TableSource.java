package dev.wayline.routing;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Routing tables as the delivery job's driver publishes them in a folder
 * (wayline.delivery.routing_table.publish): {@code v<version>.json}, written once each, and
 * {@code CURRENT}, the version to route with now. One per folder and executor JVM, shared
 * by its tasks.
 */
final class TableSource {
  /** How often a followed folder's CURRENT is read: a registry change reaches every running
   * task within this, and no task reads a file per event. */
  private static final long CHECK_NANOS = 1_000_000_000L;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Logger LOG = LoggerFactory.getLogger(TableSource.class);
  private static final ConcurrentHashMap<String, TableSource> FOLLOWED = new ConcurrentHashMap<>();
  private static final ConcurrentHashMap<Pinned, RoutingTable> PINNED = new ConcurrentHashMap<>();
  private static final int PINNED_KEPT = 8;

  private record Pinned(String folder, long version) {}

  private final Path folder;
  private volatile RoutingTable table;
  private volatile long checkedAt;

  private TableSource(Path folder) {
    this.folder = folder;
  }

  /** The table {@code folder}'s CURRENT names, looked at again at most once a second. */
  static RoutingTable followed(String folder) {
    return FOLLOWED.computeIfAbsent(folder, name -> new TableSource(Path.of(name))).current();
  }

  /** The table of {@code version}, whatever CURRENT says: for a micro-batch planned with it.
   * A few versions are kept, the ones the batches running now name. */
  static RoutingTable pinned(String folder, long version) {
    Pinned key = new Pinned(folder, version);
    RoutingTable kept = PINNED.get(key);
    if (kept != null) {
      return kept;
    }
    synchronized (PINNED) {
      kept = PINNED.get(key);
      if (kept == null) {
        kept = load(Path.of(folder), version);
        if (PINNED.size() >= PINNED_KEPT) {
          PINNED.clear();
        }
        PINNED.put(key, kept);
      }
      return kept;
    }
  }

  private RoutingTable current() {
    RoutingTable known = table;
    if (known != null && System.nanoTime() - checkedAt < CHECK_NANOS) {
      return known;
    }
    synchronized (this) {
      if (table != null && System.nanoTime() - checkedAt < CHECK_NANOS) {
        return table;
      }
      try {
        long version = Long.parseLong(Files.readString(folder.resolve("CURRENT")).trim());
        if (table == null || table.version != version) {
          table = load(folder, version);
        }
      } catch (IOException | RuntimeException exc) {
        if (table == null) {
          throw exc instanceof IOException io ? new UncheckedIOException(missing(folder), io) : (RuntimeException) exc;
        }
        // The driver replaces files while tasks read them: route with the table in hand and look again.
        LOG.warn("routing table in {} not reloaded, still routing with version {}: {}", folder, table.version, exc.toString());
      }
      checkedAt = System.nanoTime();
      return table;
    }
  }

  private static RoutingTable load(Path folder, long version) {
    Path file = folder.resolve("v" + version + ".json");
    try {
      return RoutingTable.read(JSON.readTree(file.toFile()));
    } catch (NoSuchFileException exc) {
      throw new UncheckedIOException(missing(folder), exc);
    } catch (IOException exc) {
      throw new UncheckedIOException("cannot read the routing table " + file + ": " + exc.getMessage(), exc);
    }
  }

  private static String missing(Path folder) {
    return "no routing table in " + folder + ": the delivery job's driver publishes one before it starts its query, "
        + "in a folder every executor must see at the same path (a local master, or a shared file system)";
  }
}
