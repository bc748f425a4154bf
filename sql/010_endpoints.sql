--
-- Endpoints: create_endpoint, alter_endpoint, pause/resume, drop of an empty endpoint,
-- and every way to get their arguments wrong.  After each group of refused calls the
-- tables are shown unchanged.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

-- A view of the endpoints without the timestamps that change from run to run.
CREATE TEMP VIEW eps AS
SELECT name, url, channel, headers, timeout_ms, max_attempts, ordered, max_pending, concurrency, rate_limit, paused,
       breaker_state, breaker_failures, breaker_open_until, breaker_cooldown_ms
  FROM outbox.endpoints;
CREATE TEMP VIEW secrets AS
SELECT endpoint, left(secret, 10) || '...' AS secret_prefix FROM outbox.endpoint_secrets;

------------------------------------------------------------------------------------------
-- create_endpoint: normal use
------------------------------------------------------------------------------------------
-- HTTP, every option given.
SELECT outbox.create_endpoint('billing',
                              url => 'https://hooks.example.com/billing?tenant=42',
                              headers => '{"Authorization": "Bearer abc", "X-Tenant": "42"}',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
                              timeout_ms => 2000, max_attempts => 5, ordered => true,
                              max_pending => 100);
-- HTTP, defaults only: NULL options fall back to the GUCs.
SELECT outbox.create_endpoint('audit.v1', url => 'http://127.0.0.1:8080/hooks/audit');
-- NOTIFY.
SELECT outbox.create_endpoint('orders_feed', channel => 'orders');
-- headers => NULL is the same as '{}'.
SELECT outbox.create_endpoint('h-null', url => 'http://localhost:9000/x', headers => NULL);
-- Names: digits first, dots, dashes, underscores, 63 characters.
SELECT outbox.create_endpoint('0-a_b.c', url => 'http://[::1]:8080/');
SELECT outbox.create_endpoint(repeat('a', 63), channel => 'c63');
\echo :SQLSTATE
SELECT * FROM eps ORDER BY name;
SELECT * FROM secrets ORDER BY endpoint;

------------------------------------------------------------------------------------------
-- create_endpoint: bad input
------------------------------------------------------------------------------------------
-- Names: upper case, too long, quotes, ";", spaces, empty, a bad first character, NULL.
SELECT outbox.create_endpoint('Billing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint(repeat('a', 64), url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bill"ing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bill''ing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('billing;drop', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bill ing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('_billing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('-billing', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bïlling', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint(NULL, url => 'http://example.com/');
\echo :SQLSTATE

-- Exactly one of url and channel.
SELECT outbox.create_endpoint('neither');
\echo :SQLSTATE
SELECT outbox.create_endpoint('both', url => 'http://example.com/', channel => 'orders');
\echo :SQLSTATE

-- URLs: another scheme, no host, spaces, not absolute, empty, a bad port.
SELECT outbox.create_endpoint('bad-url', url => 'ftp://example.com/hooks');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'http://');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'http:///hooks');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'http://exa mple.com/hooks');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'https://example.com/my hooks');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => ' http://example.com/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'example.com/hooks');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => '');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'javascript:alert(1)');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => 'http://example.com:99999/');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-url', url => E'http://example.com/\r\nX-Injected: 1');
\echo :SQLSTATE

-- Channels: empty, longer than an identifier.
SELECT outbox.create_endpoint('bad-channel', channel => '');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-channel', channel => repeat('c', 64));
\echo :SQLSTATE

-- Headers: not an object, values that are not strings, CR/LF in a name or a value,
-- names that are not HTTP tokens.
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '["X-A", "1"]');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '"X-A: 1"');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": 1}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": true}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": null}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": {"b": "c"}}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": ["b"]}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A\r\nX-Injected": "1"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": "1\r\nX-Injected: 1"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": "1\n"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A": "1\u0007"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X A": "1"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"X-A:": "1"}');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-headers', url => 'http://example.com/', headers => '{"": "1"}');
\echo :SQLSTATE

-- Secrets: no whsec_ prefix, not base64, empty, too short, on a NOTIFY endpoint.  The
-- secret itself never appears in the error.
SELECT outbox.create_endpoint('bad-secret', url => 'http://example.com/', secret => 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-secret', url => 'http://example.com/', secret => 'whsec_Zm9v!!not base64**');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-secret', url => 'http://example.com/', secret => 'whsec_');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-secret', url => 'http://example.com/', secret => 'whsec_c2hvcnQ=');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-secret', url => 'http://example.com/', secret => '');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-secret', channel => 'orders', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
\echo :SQLSTATE

-- Limits: zero and negative.
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', timeout_ms => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', timeout_ms => -1);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', max_attempts => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', max_attempts => -5);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', max_pending => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', max_pending => -1);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', concurrency => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', rate_limit => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad-limit', url => 'http://example.com/', timeout_ms => 300001);
\echo :SQLSTATE

-- A name that is taken, whatever the other arguments.
SELECT outbox.create_endpoint('billing', url => 'http://example.com/other');
\echo :SQLSTATE
SELECT outbox.create_endpoint('orders_feed', channel => 'other');
\echo :SQLSTATE

-- Nothing changed.
SELECT * FROM eps ORDER BY name;
SELECT * FROM secrets ORDER BY endpoint;

------------------------------------------------------------------------------------------
-- alter_endpoint
------------------------------------------------------------------------------------------
-- Every argument.
SELECT outbox.alter_endpoint('billing', url => 'https://hooks.example.com/billing/v2',
                             headers => '{"X-Tenant": "43"}',
                             secret => 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0',
                             timeout_ms => 3000, max_attempts => 7, ordered => false,
                             max_pending => 50, concurrency => 4, rate_limit => 100);
SELECT * FROM eps WHERE name = 'billing';
SELECT * FROM secrets ORDER BY endpoint;
-- One argument: the others stay as they are.
SELECT outbox.alter_endpoint('billing', max_attempts => 9);
SELECT * FROM eps WHERE name = 'billing';
-- No argument: a no-op.
SELECT outbox.alter_endpoint('billing');
SELECT * FROM eps WHERE name = 'billing';
-- A NOTIFY endpoint takes headers (they go nowhere) and limits.
SELECT outbox.alter_endpoint('orders_feed', ordered => true, max_pending => 10);
SELECT * FROM eps WHERE name = 'orders_feed';
-- A secret is added, replaced, and removed with ''.
SELECT outbox.alter_endpoint('audit.v1', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT * FROM secrets ORDER BY endpoint;
SELECT outbox.alter_endpoint('audit.v1', secret => 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
SELECT * FROM secrets ORDER BY endpoint;
SELECT outbox.alter_endpoint('audit.v1', secret => '');
SELECT * FROM secrets ORDER BY endpoint;
-- Removing a secret that is not there is fine too.
SELECT outbox.alter_endpoint('audit.v1', secret => '');
\echo :SQLSTATE

-- Bad input: unknown endpoint, NULL name, turning NOTIFY into HTTP, a secret on a
-- NOTIFY endpoint, and the same checks as create_endpoint.
SELECT outbox.alter_endpoint('nope', max_attempts => 3);
\echo :SQLSTATE
SELECT outbox.alter_endpoint(NULL, max_attempts => 3);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('orders_feed', url => 'http://example.com/');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('orders_feed', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', url => 'ftp://example.com/');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', url => 'http://');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', url => '');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', headers => '[]');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', headers => '{"X-A": 2}');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', headers => '{"X-A": "a\r\nb"}');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', secret => 'not-a-secret');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', timeout_ms => 0);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', max_attempts => -1);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', max_pending => 0);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', concurrency => -2);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', rate_limit => -1);
\echo :SQLSTATE
-- A refused call changes nothing, not even the arguments that were fine.
SELECT outbox.alter_endpoint('billing', max_attempts => 2, timeout_ms => -1);
\echo :SQLSTATE
SELECT * FROM eps ORDER BY name;
SELECT * FROM secrets ORDER BY endpoint;

------------------------------------------------------------------------------------------
-- pause_endpoint / resume_endpoint
------------------------------------------------------------------------------------------
SELECT outbox.pause_endpoint('billing');
SELECT name, paused FROM outbox.endpoints ORDER BY name;
-- Pausing twice is fine.
SELECT outbox.pause_endpoint('billing');
\echo :SQLSTATE
SELECT outbox.resume_endpoint('billing');
SELECT name, paused FROM outbox.endpoints WHERE name = 'billing';
-- Resuming an endpoint that is not paused is fine.
SELECT outbox.resume_endpoint('billing');
\echo :SQLSTATE
SELECT outbox.pause_endpoint('nope');
\echo :SQLSTATE
SELECT outbox.resume_endpoint('nope');
\echo :SQLSTATE
SELECT outbox.pause_endpoint(NULL);
\echo :SQLSTATE
SELECT outbox.resume_endpoint(NULL);
\echo :SQLSTATE
SELECT count(*) FILTER (WHERE paused) AS paused_endpoints FROM outbox.endpoints;

------------------------------------------------------------------------------------------
-- drop_endpoint of endpoints without messages (with messages: 030_drop_endpoint)
------------------------------------------------------------------------------------------
SELECT outbox.drop_endpoint('h-null');
SELECT outbox.drop_endpoint(repeat('a', 63));
-- Its secret goes with it.
SELECT outbox.drop_endpoint('billing');
SELECT * FROM eps ORDER BY name;
SELECT * FROM secrets ORDER BY endpoint;
-- A dropped name can be used again.
SELECT outbox.create_endpoint('billing', url => 'http://example.com/again');
SELECT name, url FROM outbox.endpoints WHERE name = 'billing';
SELECT outbox.drop_endpoint('nope');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('nope', force => true);
\echo :SQLSTATE
SELECT outbox.drop_endpoint(NULL);
\echo :SQLSTATE
SELECT name FROM outbox.endpoints ORDER BY name;

-- The table's own checks hold for privileged direct writes too.
-- (terse: the DETAIL shows the row, with its created_at)
\set VERBOSITY terse
INSERT INTO outbox.endpoints (name, url, channel) VALUES ('direct', 'http://example.com/', 'orders');
\echo :SQLSTATE
INSERT INTO outbox.endpoints (name, url) VALUES ('Direct', 'http://example.com/');
\echo :SQLSTATE
UPDATE outbox.endpoints SET max_pending = 0 WHERE name = 'billing';
\echo :SQLSTATE
UPDATE outbox.endpoints SET concurrency = 0 WHERE name = 'billing';
\echo :SQLSTATE
UPDATE outbox.endpoints SET breaker_state = 'ajar' WHERE name = 'billing';
\echo :SQLSTATE
\set VERBOSITY default

-- Clean up for the next file.
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
