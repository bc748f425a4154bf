------------------------------------------------------------------------------------------
-- Secrets: rotation without an outage, and the public key of an ed25519 secret
-- (docs/delivery.md, Signatures; docs/operations.md, Rotating a secret)
------------------------------------------------------------------------------------------

-- new_secret becomes the endpoint's secret; the one it replaces keeps signing for grace
-- (every request carries a signature with each), then the worker forgets it on its own.
-- A second rotation within the grace keeps the two newest: the secret before them goes
-- at once.  grace => '0' replaces the secret at once, as alter_endpoint does.  The two may
-- be of different schemes (whsec_ and whsk_): each signs with its own.  Refused, with
-- nothing changed: a NULL argument (22004), an unknown endpoint (42704), a NOTIFY
-- endpoint, a malformed secret, the current secret again, a negative grace (22023).
-- No error contains a secret.
CREATE OR REPLACE FUNCTION outbox.rotate_secret(endpoint text, new_secret text, grace interval DEFAULT '24h')
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_url text;
BEGIN
    IF rotate_secret.endpoint IS NULL THEN
        RAISE EXCEPTION 'endpoint must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF rotate_secret.new_secret IS NULL THEN
        RAISE EXCEPTION 'new_secret must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'To stop signing, use outbox.alter_endpoint(name, secret => '''').';
    END IF;
    IF rotate_secret.grace IS NULL THEN
        RAISE EXCEPTION 'grace must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass interval ''0'' to replace the secret at once.';
    END IF;
    IF rotate_secret.grace < interval '0' THEN
        RAISE EXCEPTION 'grace must not be negative'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('grace is %s.', rotate_secret.grace);
    END IF;

    -- As alter_endpoint: a concurrent alter, drop or rotation of this endpoint waits.
    SELECT e.url INTO v_url
      FROM outbox.endpoints e
     WHERE e.name = rotate_secret.endpoint
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', rotate_secret.endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    IF v_url IS NULL THEN
        RAISE EXCEPTION 'a secret can only be set on a url endpoint'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'NOTIFY deliveries are not signed, and readers of a pull endpoint take theirs from the database.';
    END IF;
    PERFORM outbox._check_secret(rotate_secret.new_secret);
    IF EXISTS (SELECT FROM outbox.endpoint_secrets s
                WHERE s.endpoint = rotate_secret.endpoint AND s.secret = rotate_secret.new_secret
                  AND s.expires_at IS NULL) THEN
        RAISE EXCEPTION 'new_secret is already the current secret of endpoint "%"', rotate_secret.endpoint
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A rotation needs a new secret.';
    END IF;

    -- The two newest stay: the current secret becomes the old one, older ones go.
    DELETE FROM outbox.endpoint_secrets s
     WHERE s.endpoint = rotate_secret.endpoint
       AND (s.expires_at IS NOT NULL OR rotate_secret.grace = interval '0');
    UPDATE outbox.endpoint_secrets s
       SET expires_at = clock_timestamp() + rotate_secret.grace
     WHERE s.endpoint = rotate_secret.endpoint AND s.expires_at IS NULL;
    INSERT INTO outbox.endpoint_secrets (endpoint, secret)
    VALUES (rotate_secret.endpoint, rotate_secret.new_secret);

    PERFORM outbox._request_wake();   -- the worker signs with both from the commit on
END
$fn$;
COMMENT ON FUNCTION outbox.rotate_secret(text, text, interval) IS
    'replaces an endpoint''s secret; the old one keeps signing beside it for grace, then is forgotten';

-- The "whpk_" public key that verifies the endpoint's "v1a" signatures: the public key of
-- its current "whsk_" secret.  NULL when the endpoint's current secret is a "whsec_" one
-- (or it has none).  During a rotation from one whsk_ key to another, receivers keep
-- the old public key until the grace ends.  Unknown endpoint: 42704.
CREATE OR REPLACE FUNCTION outbox.endpoint_public_key(endpoint text)
    RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_secret text;
BEGIN
    IF endpoint_public_key.endpoint IS NULL THEN
        RAISE EXCEPTION 'endpoint must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM FROM outbox.endpoints e WHERE e.name = endpoint_public_key.endpoint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', endpoint_public_key.endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT s.secret INTO v_secret
      FROM outbox.endpoint_secrets s
     WHERE s.endpoint = endpoint_public_key.endpoint AND s.expires_at IS NULL;
    RETURN outbox._public_key(v_secret);
END
$fn$;
COMMENT ON FUNCTION outbox.endpoint_public_key(text) IS
    'the whpk_ public key that verifies an endpoint''s v1a (ed25519) signatures; NULL without a whsk_ secret';
