// Executes Tidemark's modern-dialect DDL in chDB, an in-process build of a current ClickHouse engine, and exits
// non-zero on the first error. internal/store's Go tests run it as `node run.mjs ../testdata/golden/modern.sql`.
//
// The file is split into statements exactly as internal/store.SplitStatements does: full-line "--" comments are
// dropped and a statement ends at a line ending with ';'. Every statement runs twice (migrations must be idempotent;
// an ADD COLUMN's second run may fail with DUPLICATE_COLUMN, which Migrate treats as applied),
// then a few rows go through latency_events so the materialized view and the rollup's -Merge reads run too.
// The last line printed is `ok <statements> statements, engine <version>`.
//
// `node run.mjs --parse FILE.sql` only parses each statement (EXPLAIN AST) and prints `ok <statements> statements
// parsed, engine <version>`: the cluster-mode DDL (ON CLUSTER, Replicated* engines, Distributed tables) needs a
// cluster and ZooKeeper, which chDB has not, so the current engine checks its syntax, 18.16 runs it for real.
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Session } from "chdb";

function splitStatements(sql) {
  const stmts = [];
  let cur = [];
  for (const line of sql.split("\n")) {
    const t = line.trim();
    if (t === "" || t.startsWith("--")) continue;
    cur.push(line.trimEnd());
    if (t.endsWith(";")) {
      stmts.push(cur.join("\n").trim().replace(/;$/, ""));
      cur = [];
    }
  }
  const rest = cur.join("\n").trim();
  if (rest !== "") stmts.push(rest);
  return stmts;
}

const parseOnly = process.argv[2] === "--parse";
const files = process.argv.slice(parseOnly ? 3 : 2);
if (files.length === 0) {
  console.error("usage: node run.mjs FILE.sql...");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "tidemark-chdb-"));
const session = new Session(dir);
let failed = false;
try {
  const stmts = files.flatMap((f) => splitStatements(readFileSync(f, "utf8")));
  run: {
  if (parseOnly) {
    for (const s of stmts) {
      try {
        session.query("EXPLAIN AST " + s, "CSV");
      } catch (e) {
        throw new Error(`parse: ${e.message}\n--- statement ---\n${s}`);
      }
    }
    const version = session.query("SELECT version()", "CSV").trim();
    console.log(`ok ${stmts.length} statements parsed, engine ${version}`);
    break run;
  }
  // later(s): a statement after s extends the sorting key of s's table again
  const later = (s) => {
    const t = s.match(/^ALTER TABLE (\S+)/)?.[1];
    return stmts.slice(stmts.indexOf(s) + 1).some((x) => x.startsWith(`ALTER TABLE ${t} `) && / MODIFY ORDER BY /.test(x));
  };
  for (const pass of [1, 2]) {
    for (const s of stmts) {
      // Second pass of a key extension that a later migration extended further (0005's MODIFY ORDER BY after 0006
      // added cluster to the same key): not re-run, as Migrate never re-runs a recorded migration (only the
      // interrupted last one). Run, it would shorten the key back, and the later one would then re-add an existing column.
      if (pass === 2 && / MODIFY ORDER BY /.test(s) && later(s)) continue;
      try {
        session.query(s, "CSV");
      } catch (e) {
        // Second pass of an ADD COLUMN: Migrate counts "already exists" as applied (store.ColumnAlreadyAdded).
        if (pass === 2 && /^ALTER TABLE /.test(s) && / ADD COLUMN /.test(s) && /DUPLICATE_COLUMN/.test(e.message)) continue;
        throw new Error(`pass ${pass}: ${e.message}\n--- statement ---\n${s}`);
      }
    }
  }
  // Two live rows and one replay for one (topic, group); the MV must aggregate them per stage. The rows are stamped
  // now: older rows would be past the tables' TTL, and the server may drop their part before the read.
  session.query(`INSERT INTO latency_events
    (record_time, observed_time, consumer_group, topic, partition, offset, replay_class, source,
     event_ts_ms, append_ts_ms, receive_ts_ms, processed_ts_ms, ingest_ms, queue_ms, process_ms, e2e_ms, valid,
     producer_host, consumer_host, ver)
    VALUES
    (now(), now(), 'g', 't', 0, 1, 'live', 'receipt', 1, 2, 3, 4, 10, 20, 30, 60, 15, 'p1', 'c1', 1),
    (now(), now(), 'g', 't', 0, 2, 'live', 'receipt', 1, 2, 3, 4, 10, 20, 30, 60, 15, 'p1', 'c1', 1),
    (now(), now(), 'g', 't', 0, 1, 'replay', 'receipt', 1, 2, 3, 4, 10, 20, 30, 60, 15, 'p1', 'c1', 1)`, "CSV");
  const got = session.query(`SELECT stage, sumMerge(live), sumMerge(replay), quantilesTDigestMerge(0.5)(latency_ms)[1]
    FROM latency_1m GROUP BY stage ORDER BY stage`, "CSV").trim();
  const want = ['"ingest",2,1,10', '"queue",2,1,20', '"process",2,1,30', '"e2e",2,1,60'].join("\n");
  if (got !== want) throw new Error(`rollup read back:\n${got}\nwant:\n${want}`);
  const version = session.query("SELECT version()", "CSV").trim();
  console.log(`ok ${stmts.length} statements, engine ${version}`);
  }
} catch (e) {
  console.error(`chdb: ${e.message}`);
  failed = true;
} finally {
  session.cleanup?.();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
