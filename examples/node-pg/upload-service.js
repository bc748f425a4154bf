// A document-upload service that tells the world about each upload through pg_outbox.
//
// Saving an upload writes the business rows (the file and the task that processes it)
// and enqueues a "source_file.uploaded" event in one transaction. If anything throws
// before the COMMIT, the rows and the event are rolled back together: no webhook
// announces a file that was never saved.
//
// Connects with the usual libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGPASSWORD) or DATABASE_URL, as the application role of ../setup.sql.
//
//   node upload-service.js --uploads 12 --fail-every 3
'use strict';

const crypto = require('node:crypto');
const { parseArgs } = require('node:util');
const { Pool } = require('pg');

// Runs fn(client) between BEGIN and COMMIT on one pooled connection; if fn throws, rolls
// back and rethrows. Every query of fn must use the client it is given: a query through
// the pool would run on another connection, outside the transaction.
async function withTransaction(pool, fn) {
  const client = await pool.connect();
  let broken;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackErr) {
      broken = rollbackErr; // the connection is unusable: the pool must not reuse it
    }
    throw err;
  } finally {
    client.release(broken);
  }
}

async function saveUpload(client, filename, content, taskKind = 'extract_text') {
  const sourceFile = {
    id: crypto.randomUUID(),
    filename,
    sha256: crypto.createHash('sha256').update(content).digest('hex'),
    size_bytes: content.length,
  };
  await client.query(
    'INSERT INTO source_files (id, filename, sha256, size_bytes) VALUES ($1, $2, $3, $4)',
    [sourceFile.id, sourceFile.filename, sourceFile.sha256, sourceFile.size_bytes]);

  // The event is a row in this transaction, not a network call: it is sent after the
  // COMMIT, and never if the transaction rolls back. The idempotency key becomes the
  // webhook-id, which the receiver uses to drop a repeated delivery.
  await client.query(
    `SELECT outbox.enqueue($1, $2::jsonb, event_type => $3, idempotency_key => $4)`,
    ['documents',
     JSON.stringify({
       source_file_id: sourceFile.id,
       filename: sourceFile.filename,
       sha256: sourceFile.sha256,
       size_bytes: sourceFile.size_bytes,
     }),
     'source_file.uploaded',
     `source_file:${sourceFile.id}:uploaded`]);

  // Saving the task can still fail after the enqueue (here: a kind the database
  // refuses). The error rolls back the file row and the event with it.
  await client.query('INSERT INTO tasks (source_file_id, kind) VALUES ($1, $2)',
    [sourceFile.id, taskKind]);
  return sourceFile;
}

async function main() {
  const { values } = parseArgs({
    options: {
      uploads: { type: 'string', default: '5' },
      'fail-every': { type: 'string', default: '0' }, // every Nth upload fails after its enqueue
      prefix: { type: 'string', default: 'node' },    // file names are PREFIX-<n>.pdf
    },
  });
  const uploads = Number(values.uploads);
  const failEvery = Number(values['fail-every']);

  // Without a connection string, pg reads PGHOST, PGUSER and the rest, as libpq does.
  const pool = new Pool(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {});
  let failed = 0;
  try {
    for (let n = 1; n <= uploads; n++) {
      const filename = `${values.prefix}-${String(n).padStart(3, '0')}.pdf`;
      const content = Buffer.from(`%PDF-1.7 document ${n} of batch ${values.prefix}`);
      const doomed = failEvery > 0 && n % failEvery === 0;
      try {
        const sourceFile = await withTransaction(pool, (client) =>
          saveUpload(client, filename, content, doomed ? 'unknown' : 'extract_text'));
        console.log(`committed ${filename} ${sourceFile.id}`);
      } catch (err) {
        failed++;
        console.log(`rolled back ${filename}: ${err.message}`);
      }
    }
  } finally {
    await pool.end();
  }
  console.log(`${uploads - failed} committed, ${failed} rolled back`);
  // A failed upload is what the demo asks for; only an unexpected count is an error.
  const expected = failEvery > 0 ? Math.floor(uploads / failEvery) : 0;
  process.exitCode = failed === expected ? 0 : 1;
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
