// Runs the read queries, as internal/store/query renders them (chdb_test.go writes them with their values bound),
// on chDB, an in-process current ClickHouse engine, over the modern-dialect schema with a few rows: each must run,
// and the answers must equal the expected CSV lines the Go test wrote beside them.
// Usage: node chdb_queries.mjs <store chdbtest dir> <modern.sql> <queries.json>
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const [chdbDir, ddlFile, queriesFile] = process.argv.slice(2);
const { Session } = createRequire(join(resolve(chdbDir), 'package.json'))('chdb');

function splitStatements(sql) {
  const stmts = [];
  let cur = [];
  for (const line of sql.split('\n')) {
    const t = line.trim();
    if (t === '' || t.startsWith('--')) continue;
    cur.push(line.trimEnd());
    if (t.endsWith(';')) {
      stmts.push(cur.join('\n').trim().replace(/;$/, ''));
      cur = [];
    }
  }
  return stmts;
}

const dir = mkdtempSync(join(tmpdir(), 'tidemark-chdb-q-'));
const session = new Session(dir);
let failed = 0;
try {
  for (const s of splitStatements(readFileSync(ddlFile, 'utf8'))) session.query(s, 'CSV');
  const { setup, queries } = JSON.parse(readFileSync(queriesFile, 'utf8'));
  for (const s of setup) session.query(s, 'CSV');
  const bucket = session
    .query("SELECT toString(toDateTime(intDiv(toUInt32(max(observed_time)), 7200) * 7200, 'UTC')) FROM latency_events", 'CSV')
    .trim()
    .replace(/"/g, '');
  for (const q of queries) {
    let got;
    try {
      got = session.query(q.sql, 'CSV').trim();
    } catch (e) {
      console.log(`FAIL ${q.name}: ${e.message}\n${q.sql}`);
      failed++;
      continue;
    }
    const want = q.want?.replaceAll('{bucket}', bucket);
    if (want !== undefined && got !== want) {
      console.log(`FAIL ${q.name}: got\n${got}\nwant\n${want}`);
      failed++;
      continue;
    }
    console.log(`ok ${q.name}`);
  }
  console.log(`engine ${session.query('SELECT version()', 'CSV').trim()}`);
} finally {
  session.cleanup?.();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failed > 0 ? 1 : 0);
