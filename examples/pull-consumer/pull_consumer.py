#!/usr/bin/env python3
"""A document-upload service whose own workers process each upload through a pg_outbox
pull endpoint, with no HTTP endpoint anywhere.

  upload: saves an uploaded file and its task (business rows) and enqueues a
          "source_file.uploaded" message to the pull endpoint "parser", all in one
          transaction: a failed save leaves no message.
  work:   a worker: reads messages (each goes to one worker; a worker that dies gives
          them back after the visibility timeout), processes each, and in the same
          transaction marks its task done and acknowledges it. A file it cannot process
          is refused with nack: retried with the endpoint's backoff, then dead-lettered
          (RETRY_EXHAUSTED, with the worker's error) after max_attempts.

Connects with the usual libpq variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD), as the roles of setup.sql (the web role uploads, the worker role works).

    python3 pull_consumer.py upload --uploads 10 --corrupt-every 4
    python3 pull_consumer.py work --idle-exit 3
"""

import argparse
import hashlib
import json
import sys
import uuid

import psycopg2


def upload(conn, n, corrupt):
    """One upload: the file, its task and the message, committed together."""
    filename = f"{'corrupt' if corrupt else 'report'}-{n:03}.pdf"
    content = (b"garbage" if corrupt else b"%PDF-1.7 ") + str(n).encode()
    file_id = uuid.uuid4()
    with conn, conn.cursor() as cur:  # one transaction: committed at the end, or rolled back
        cur.execute(
            "INSERT INTO source_files (id, filename, sha256, size_bytes) VALUES (%s, %s, %s, %s)",
            (str(file_id), filename, hashlib.sha256(content).hexdigest(), len(content)),
        )
        cur.execute(
            "INSERT INTO tasks (source_file_id, kind) VALUES (%s, 'extract_text') RETURNING id",
            (str(file_id),),
        )
        task_id = cur.fetchone()[0]
        cur.execute(
            "SELECT outbox.enqueue('parser', %s::jsonb, event_type => 'source_file.uploaded',"
            " idempotency_key => %s)",
            (json.dumps({"task_id": task_id, "source_file_id": str(file_id), "filename": filename}),
             f"source_file:{file_id}:uploaded"),
        )
    print(f"uploaded {filename} task {task_id}")


def process(cur, payload):
    """The work itself: here, a file whose name says corrupt cannot be parsed."""
    if payload["filename"].startswith("corrupt"):
        raise ValueError(f"cannot parse {payload['filename']}: not a PDF")
    cur.execute("UPDATE tasks SET status = 'done' WHERE id = %s", (payload["task_id"],))


def work(conn, idle_exit):
    """Reads until a read that waited idle_exit seconds found nothing."""
    done = refused = 0
    while True:
        with conn, conn.cursor() as cur:
            # Committed at once: the messages are this worker's for 30 s.
            cur.execute(
                "SELECT id, attempt, payload FROM outbox.read('parser', max => 10,"
                " visibility => '30s', wait => make_interval(secs => %s))",
                (idle_exit,),
            )
            batch = cur.fetchall()
        if not batch:
            break
        for message_id, attempt, payload in batch:
            try:
                # The task's change and the ack commit together: a crash in between
                # leaves both undone, and the message comes back.
                with conn, conn.cursor() as cur:
                    process(cur, payload)
                    cur.execute("SELECT outbox.ack('parser', ARRAY[%s]::bigint[])", (message_id,))
                done += 1
                print(f"done message {message_id} (attempt {attempt})")
            except ValueError as err:
                with conn, conn.cursor() as cur:
                    cur.execute("SELECT outbox.nack('parser', %s, %s)", (message_id, str(err)))
                refused += 1
                print(f"refused message {message_id} (attempt {attempt}): {err}")
    print(f"{done} done, {refused} refused")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upload", help="save uploads and enqueue their messages")
    up.add_argument("--uploads", type=int, default=5)
    up.add_argument("--corrupt-every", type=int, default=0, help="every Nth file cannot be parsed (0: none)")
    wk = sub.add_parser("work", help="read, process and acknowledge messages")
    wk.add_argument("--idle-exit", type=float, default=5.0, help="stop after a read waited this long in vain")
    args = parser.parse_args()

    conn = psycopg2.connect("")  # libpq reads PGHOST, PGUSER and the rest
    try:
        if args.command == "upload":
            for n in range(1, args.uploads + 1):
                upload(conn, n, args.corrupt_every > 0 and n % args.corrupt_every == 0)
        else:
            work(conn, args.idle_exit)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
