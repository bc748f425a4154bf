-- What an administrator runs once, as a superuser (or the extension's owner), before
-- pull_consumer.py can run: the business tables of the document-upload service (as
-- ../setup.sql has them), a pull endpoint "parser" that the service's own workers read,
-- and two roles: the web process that saves uploads (producer) and the parser workers
-- (consumer), each with its own rights and no more.
--
--   CREATE ROLE uploads_app LOGIN PASSWORD '...';   -- once, your way
--   CREATE ROLE parser_app LOGIN PASSWORD '...';
--   psql -v producer=uploads_app -v consumer=parser_app -f examples/pull-consumer/setup.sql
\set ON_ERROR_STOP on

CREATE EXTENSION IF NOT EXISTS pg_outbox;

CREATE TABLE IF NOT EXISTS source_files (
    id          uuid PRIMARY KEY,
    filename    text NOT NULL,
    sha256      text NOT NULL,
    size_bytes  bigint NOT NULL,
    uploaded_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS tasks (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_file_id uuid NOT NULL REFERENCES source_files (id),
    kind           text NOT NULL CHECK (kind IN ('extract_text', 'thumbnail')),
    status         text NOT NULL DEFAULT 'queued'
);

-- Nobody pushes to "parser": the workers take its messages (docs/delivery.md, Pull
-- endpoints). A file that fails three times goes to the dead-letter queue.
SELECT outbox.create_endpoint('parser', pull => true, max_attempts => 3)
 WHERE NOT EXISTS (SELECT FROM outbox.endpoints WHERE name = 'parser');

-- The web process: saves uploads and enqueues to "parser"; reads no message.
GRANT SELECT, INSERT ON source_files, tasks TO :"producer";
GRANT USAGE ON SCHEMA outbox TO :"producer";
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)
  TO :"producer";
SELECT outbox.grant_send('parser', :'producer');

-- The workers: read, acknowledge and refuse "parser"'s messages, and mark tasks done;
-- they cannot enqueue, and read nothing else of the outbox.
GRANT SELECT ON source_files TO :"consumer";
GRANT SELECT, UPDATE (status) ON tasks TO :"consumer";
GRANT USAGE ON SCHEMA outbox TO :"consumer";
GRANT EXECUTE ON FUNCTION outbox.read(text, int, interval, interval),
    outbox.ack(text, bigint[]), outbox.nack(text, bigint, text, interval, boolean)
  TO :"consumer";
SELECT outbox.grant_consume('parser', :'consumer');
