--
-- Secrets: rotate_secret (the old secret kept for a grace, at most the two newest),
-- ed25519 secrets and endpoint_public_key, alter_endpoint during a rotation, and every
-- way to get the arguments wrong: each refused with its SQLSTATE and nothing changed.
-- The worker's side (what is signed with which secret, and when the old one stops) is
-- test/t/093_secret_rotation.pl.
--
\set SHOW_CONTEXT never
DELETE FROM outbox.endpoints;

-- The secrets by rank, without the secrets themselves: what kind, a short tag, and
-- how long the old one has left (rounded, so that the output does not depend on time).
CREATE TEMP VIEW ring AS
SELECT endpoint, split_part(secret, '_', 1) AS kind, right(secret, 6) AS tail,
       CASE WHEN expires_at IS NULL THEN 'current'
            ELSE 'old, ' || round(extract(epoch FROM expires_at - now()) / 3600) || ' h left' END AS role
  FROM outbox.endpoint_secrets;
CREATE TEMP VIEW ring_raw AS SELECT endpoint, secret, expires_at FROM outbox.endpoint_secrets;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.create_endpoint('plain', url => 'http://127.0.0.1:8080/hooks/plain');
SELECT outbox.create_endpoint('feed', channel => 'feed');
SELECT * FROM ring ORDER BY endpoint, role;

------------------------------------------------------------------------------------------
-- Rotation
------------------------------------------------------------------------------------------
-- The default grace is 24 hours: both secrets sign until then.
SELECT outbox.rotate_secret('billing', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
SELECT * FROM ring ORDER BY endpoint, role;
-- Rotating again within the grace keeps the two newest: the first secret goes now.
SELECT outbox.rotate_secret('billing', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=', grace => '2 hours');
SELECT * FROM ring ORDER BY endpoint, role;
-- Back from ed25519 to HMAC, with a grace of 0: the old secret goes at once.
SELECT outbox.rotate_secret('billing', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', grace => '0');
SELECT * FROM ring ORDER BY endpoint, role;
-- An endpoint without a secret gets its first one.
SELECT outbox.rotate_secret('plain', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=', '1 hour');
SELECT * FROM ring ORDER BY endpoint, role;
-- The 64-byte form of an ed25519 key (the seed, then its public key) is accepted too.
-- (RFC 8032, test 2)
SELECT outbox.rotate_secret('plain',
  'whsk_TM0Imyj/ltqdtsNG7BFOD1uKMZ81q6Yk2oz27U+4pvs9QBfD6EOJWpK3CqdNG368nJgszy7ElozAzVXxKvRmDA==');
SELECT * FROM ring ORDER BY endpoint, role;

------------------------------------------------------------------------------------------
-- Public keys
------------------------------------------------------------------------------------------
-- The public key of the current whsk_ secret (RFC 8032, test 2); NULL for whsec_ or no
-- secret.
SELECT outbox.endpoint_public_key('plain');
SELECT outbox.endpoint_public_key('billing') IS NULL AS hmac_has_none,
       outbox.endpoint_public_key('feed') IS NULL AS notify_has_none;
-- The 32-byte form of the same key has the same public key.
SELECT outbox.rotate_secret('billing', 'whsk_TM0Imyj/ltqdtsNG7BFOD1uKMZ81q6Yk2oz27U+4pvs=');
SELECT outbox.endpoint_public_key('billing') = outbox.endpoint_public_key('plain') AS same_key;
SELECT outbox.endpoint_public_key('nope');
\echo :SQLSTATE
SELECT outbox.endpoint_public_key(NULL);
\echo :SQLSTATE

------------------------------------------------------------------------------------------
-- alter_endpoint during a rotation: a new secret replaces both at once; '' removes all.
------------------------------------------------------------------------------------------
SELECT outbox.alter_endpoint('plain', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT * FROM ring ORDER BY endpoint, role;
SELECT outbox.rotate_secret('plain', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
SELECT outbox.alter_endpoint('plain', secret => '');
SELECT * FROM ring ORDER BY endpoint, role;

------------------------------------------------------------------------------------------
-- Bad input: each refused with its SQLSTATE, nothing changed, no secret in any error.
------------------------------------------------------------------------------------------
CREATE TEMP TABLE before AS SELECT * FROM ring_raw;
SELECT outbox.rotate_secret('nope', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
SELECT outbox.rotate_secret(NULL, 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', NULL);
\echo :SQLSTATE
SELECT outbox.rotate_secret('feed', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
-- Not a signing secret: no prefix, a public key, malformed base64, wrong key lengths,
-- a 64-byte whsk_ whose second half is not its public key.
SELECT outbox.rotate_secret('billing', 'c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsec_not*base64*at*all!');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsk_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsec_c2hvcnQ=');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing',
  'whsk_TM0Imyj/ltqdtsNG7BFOD1uKMZ81q6Yk2oz27U+4pvvXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg==');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', '');
\echo :SQLSTATE
-- The grace: NULL, negative.
SELECT outbox.rotate_secret('billing', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0', NULL);
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0', '-1 second');
\echo :SQLSTATE
SELECT outbox.rotate_secret('billing', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0', '1 day -25 hours');
\echo :SQLSTATE
-- The current secret again is no rotation.
SELECT outbox.rotate_secret('billing', 'whsk_TM0Imyj/ltqdtsNG7BFOD1uKMZ81q6Yk2oz27U+4pvs=');
\echo :SQLSTATE
-- Nothing changed.
SELECT count(*) AS changed
  FROM ((SELECT * FROM before EXCEPT SELECT * FROM ring_raw) UNION ALL (SELECT * FROM ring_raw EXCEPT SELECT * FROM before)) d;

-- The table's own rules hold for a privileged direct write: one current secret.
\set VERBOSITY terse
INSERT INTO outbox.endpoint_secrets (endpoint, secret) VALUES ('billing', 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
\echo :SQLSTATE
\set VERBOSITY default

-- A dropped endpoint's secrets go with it.
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
SELECT count(*) AS secrets_left FROM outbox.endpoint_secrets;
