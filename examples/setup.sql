-- What an administrator runs once, as a superuser (or the extension's owner), before the
-- example applications can run: the business tables of a document-upload service, the
-- webhook endpoint, and the grants of the role the applications log in as.
--
--   CREATE ROLE uploads_app LOGIN PASSWORD '...';      -- once, your way
--   psql -v producer=uploads_app -v webhook_url=https://hooks.example.com/documents \
--        -f examples/setup.sql
--
-- Both examples (python-sqlalchemy/, node-pg/) use these tables and this endpoint.
\set ON_ERROR_STOP on

CREATE EXTENSION IF NOT EXISTS pg_outbox;

-- The business rows: an uploaded file, and the processing task it starts.
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
    -- The database refuses a kind it does not know: the examples use this to show a
    -- failure after the enqueue.
    kind           text NOT NULL CHECK (kind IN ('extract_text', 'thumbnail')),
    status         text NOT NULL DEFAULT 'queued'
);

-- Where the "source_file.uploaded" events go (the receiver verifies the signature with
-- the secret; pass one with `secret => ...` in production).
SELECT outbox.create_endpoint('documents', url => :'webhook_url')
 WHERE NOT EXISTS (SELECT FROM outbox.endpoints WHERE name = 'documents');

-- The application role: its own tables, and the outbox's send right on one endpoint.
-- Not a superuser, not the table owner: it cannot read the outbox, create endpoints or
-- send anywhere else (docs/operations.md, Privileges).
GRANT SELECT, INSERT ON source_files, tasks TO :"producer";
GRANT USAGE ON SCHEMA outbox TO :"producer";
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)
  TO :"producer";
SELECT outbox.grant_send('documents', :'producer');
