------------------------------------------------------------------------------------------
-- Time partitions: created ahead and dropped whole by the worker's housekeeping, for the
-- two tables partitioned by time, outbox.history and outbox.attempts
------------------------------------------------------------------------------------------

-- What differs between the partitioned tables: the time column, the index each time
-- partition gets (its own, not one inherited from a partitioned index: the partitions
-- are ordinary tables that pg_dump dumps with their indexes, and an index on the
-- extension's parent would make pg_restore create every one of them twice), and the
-- prefix of the partitions' names.  The default partition is <parent>_default.
CREATE OR REPLACE FUNCTION outbox._partition_layout(parent regclass, OUT time_column text,
                                                    OUT index_definition text, OUT name_prefix text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    CASE parent
        WHEN 'outbox.history'::regclass THEN
            -- As the attempt log's, below (0.4.0; 0.3.0's partitions keep their btree
            -- until they are dropped): the ids of a partition's messages are mostly one
            -- range, as they are delivered soon after their enqueue.
            time_column := 'sent_at';
            index_definition := 'USING brin (id int8_minmax_multi_ops) WITH (pages_per_range = 16)';
            name_prefix := 'history_';
        WHEN 'outbox.attempts'::regclass THEN
            -- Appending costs no index record per row (see the table's comment); a range
            -- of 16 pages (about 2,000 attempts) is what a lookup reads per match.
            time_column := 'attempted_at';
            index_definition := 'USING brin (message_id int8_minmax_multi_ops) WITH (pages_per_range = 16)';
            name_prefix := 'attempts_';
        ELSE
            RAISE EXCEPTION '% is not partitioned by pg_outbox', parent USING ERRCODE = 'invalid_parameter_value';
    END CASE;
END
$fn$;

-- The time partitions of parent with their bounds (the default partition is not one of
-- them).  The bounds come from the catalog, printed and read back in the same session,
-- so no naming convention is relied on.
CREATE OR REPLACE FUNCTION outbox._partitions(parent regclass, OUT partition regclass, OUT from_at timestamptz,
                                              OUT to_at timestamptz)
    RETURNS SETOF record
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.oid::regclass, b[1]::timestamptz, b[2]::timestamptz
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                     '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$') AS b
     WHERE i.inhparent = _partitions.parent
       AND b IS NOT NULL  -- the default partition has no bounds
$fn$;

-- Drops a time partition if it holds no row, with its counts (the history's); returns
-- whether it went.  A partition with rows stays.
CREATE OR REPLACE FUNCTION outbox._partition_drop_if_empty(partition regclass)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_empty boolean;
BEGIN
    EXECUTE format('SELECT NOT EXISTS (SELECT FROM %s)', partition) INTO v_empty;
    IF v_empty THEN
        DELETE FROM outbox.history_counts hc WHERE hc.partition = _partition_drop_if_empty.partition;
        EXECUTE format('DROP TABLE IF EXISTS %s', partition);
    END IF;
    RETURN v_empty;
END
$fn$;

-- Makes the partition of [from_at, to_at) although the default partition holds rows of
-- that range, written while no partition covered it (a pull consumer's ack while no
-- worker served the database, an INSERT by hand).  They move into it, with their counts
-- (the history's; the default partition's rows are counted by reading it), and the range
-- is then a time partition like any other, dropped whole in its turn: left to the
-- default partition, its rows would be deleted one by one, and every later row of the
-- range would land there too (a whole day, for the attempt log).
CREATE OR REPLACE FUNCTION outbox._partition_adopt(parent regclass, partition_name text, from_at timestamptz,
                                                   to_at timestamptz)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_layout record := outbox._partition_layout(parent);
BEGIN
    EXECUTE format('CREATE TABLE outbox.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', partition_name, parent);
    EXECUTE format('WITH moved AS (DELETE FROM %s_default d WHERE d.%I >= $1 AND d.%I < $2 RETURNING d.*)'
                   ' INSERT INTO outbox.%I SELECT * FROM moved',
                   parent, v_layout.time_column, v_layout.time_column, partition_name)
        USING from_at, to_at;
    EXECUTE format('ALTER TABLE %s ATTACH PARTITION outbox.%I FOR VALUES FROM (%L) TO (%L)',
                   parent, partition_name, from_at, to_at);
    EXECUTE format('CREATE INDEX ON outbox.%I %s', partition_name, v_layout.index_definition);
    IF parent = 'outbox.history'::regclass THEN
        EXECUTE format('INSERT INTO outbox.history_counts (partition, endpoint, slot, sent)'
                       ' SELECT $1, h.endpoint, 0, count(*) FROM outbox.%I h GROUP BY h.endpoint', partition_name)
            USING format('outbox.%I', partition_name)::regclass;
    END IF;
END
$fn$;

-- Until when partitions cover parent without a gap from the start of the current range
-- of width_s on: a range left to the default partition (its CREATE gave up) ends the
-- run, and the worker calls _partitions_prepare again soon (src/pg/worker/housekeeping.cpp).
CREATE OR REPLACE FUNCTION outbox._partitions_covered(parent regclass, width_s int)
    RETURNS timestamptz
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_at   timestamptz := to_timestamp(floor(extract(epoch FROM now()) / width_s) * width_s);
    v_next timestamptz;
BEGIN
    LOOP
        SELECT max(p.to_at) INTO v_next FROM outbox._partitions(parent) p
         WHERE p.from_at <= v_at AND p.to_at > v_at;
        EXIT WHEN v_next IS NULL;
        v_at := v_next;
    END LOOP;
    RETURN v_at;
END
$fn$;

-- Makes sure that partitions of width_s seconds, aligned on multiples of it since the
-- epoch, cover parent from now to at least three widths ahead (from the end of the
-- current partition, if it was made for a longer retention); returns until when it is
-- covered without a gap (_partitions_covered).  A range whose rows the default
-- partition already holds gets its partition with them (_partition_adopt).  A range
-- that cannot get its partition (a reader holds the table longer than the lock timeout)
-- is left to the default partition until the next call, and the next range is tried.
CREATE OR REPLACE FUNCTION outbox._partitions_prepare(parent regclass, width_s int)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '200ms'
AS $fn$
DECLARE
    v_layout  record := outbox._partition_layout(parent);
    v_from    timestamptz;
    v_to      timestamptz;
    v_covered timestamptz;
    v_name    text;
    v_old     record;
BEGIN
    IF width_s IS NULL OR width_s < 1 THEN
        RAISE EXCEPTION 'width_s must be a positive number of seconds'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A restore creating its own partitions holds this lock (restored_partitions.cpp):
    -- the two must not make a table of the same name at the same moment, or the second
    -- fails on the catalog's unique index once the first commits.  Busy: the next call.
    -- (1868724336: the partitions' lock, beside the ordering keys' 1868724335.)
    IF NOT pg_catalog.pg_try_advisory_xact_lock(1868724336, 0) THEN
        RETURN outbox._partitions_covered(parent, width_s);
    END IF;
    -- Partitions made for a longer retention (wider), the current one included, go while
    -- they are still empty: the coming rows belong in partitions of today's width.  (The
    -- worker is the only writer of these tables, and it is the one running this.)
    FOR v_old IN SELECT * FROM outbox._partitions(parent) p
                  WHERE p.to_at > now() AND p.to_at - p.from_at > make_interval(secs => width_s) LOOP
        BEGIN
            PERFORM outbox._partition_drop_if_empty(v_old.partition);
        EXCEPTION WHEN lock_not_available OR undefined_table THEN
            EXIT;
        END;
    END LOOP;
    -- Every range from this one's start to 3 widths ahead that no partition covers, holes
    -- included: a range whose CREATE gave up (lock_timeout on the default partition, busy
    -- with a long read) while a later one was made is made at the next call, not left to
    -- the default partition for good.  A range starts where a partition ends and stops
    -- where the next one begins, so partitions of an earlier width are never overlapped.
    v_from := to_timestamp(floor(extract(epoch FROM now()) / width_s) * width_s);
    WHILE v_from < now() + make_interval(secs => 3 * width_s) LOOP
        SELECT max(p.to_at) INTO v_covered FROM outbox._partitions(parent) p
         WHERE p.from_at <= v_from AND p.to_at > v_from;
        IF v_covered IS NOT NULL THEN
            v_from := v_covered;
            CONTINUE;
        END IF;
        v_to := to_timestamp((floor(extract(epoch FROM v_from) / width_s) + 1) * width_s);
        SELECT least(v_to, min(p.from_at)) INTO v_to FROM outbox._partitions(parent) p
         WHERE p.from_at > v_from;
        v_name := v_layout.name_prefix || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS');
        BEGIN
            EXECUTE format('CREATE TABLE outbox.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
                           v_name, parent, v_from, v_to);
            EXECUTE format('CREATE INDEX ON outbox.%I %s', v_name, v_layout.index_definition);
        EXCEPTION
            WHEN check_violation THEN  -- the default partition holds rows of the range
                BEGIN
                    PERFORM outbox._partition_adopt(parent, v_name, v_from, v_to);
                EXCEPTION WHEN lock_not_available OR check_violation OR duplicate_table THEN
                    NULL;  -- (a row of the range came meanwhile) the next call tries again
                END;
            WHEN lock_not_available OR duplicate_table THEN
                NULL;
        END;
        v_from := v_to;
    END LOOP;
    RETURN outbox._partitions_covered(parent, width_s);
END
$fn$;

-- Removes the rows of parent before cutoff (by its time column): each partition wholly
-- before it is dropped, and the default partition's rows before it are deleted.  The
-- rows before cutoff in the partition that straddles it are deleted too when exact
-- (outbox.purge), or when that partition is wider than trim_wider_than: it was made for
-- a longer retention than today's, and waiting for its end would keep rows hours too
-- long.  Otherwise the worker leaves them for the drop of their partition.  A partition
-- that cannot be locked within the lock timeout (a long reader) waits for the next
-- call.  Returns how many rows were removed; a dropped partition counts what
-- outbox.history_counts says of it (the history's; an attempts partition counts 0).
CREATE OR REPLACE FUNCTION outbox._partitions_retire(parent regclass, cutoff timestamptz, exact boolean,
                                                     trim_wider_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '200ms'
AS $fn$
DECLARE
    v_layout record := outbox._partition_layout(parent);
    p        record;
    v_count  bigint := 0;
    v_n      bigint;
BEGIN
    FOR p IN SELECT * FROM outbox._partitions(parent) hp
              WHERE hp.from_at < cutoff ORDER BY hp.from_at LOOP
        IF p.to_at <= cutoff THEN
            BEGIN
                SELECT coalesce(sum(hc.sent), 0) INTO v_n
                  FROM outbox.history_counts hc WHERE hc.partition = p.partition;
                DELETE FROM outbox.history_counts hc WHERE hc.partition = p.partition;
                EXECUTE format('DROP TABLE IF EXISTS %s', p.partition);
                v_count := v_count + v_n;
            EXCEPTION WHEN lock_not_available OR undefined_table THEN
                EXIT;  -- locked by a reader, or dropped by a concurrent purge(): next call
            END;
        ELSIF exact OR p.to_at - p.from_at > trim_wider_than THEN
            EXECUTE format('WITH gone AS (DELETE FROM %s h WHERE h.%I < $1 RETURNING h.endpoint),'
                           '     n AS (SELECT g.endpoint, count(*) AS n FROM gone g GROUP BY g.endpoint),'
                           '     counted AS (INSERT INTO outbox.history_counts AS hc (partition, endpoint, slot, sent)'
                           '                 SELECT $2, n.endpoint, 0, -n.n FROM n WHERE $3'
                           '                 ON CONFLICT (partition, endpoint, slot) DO UPDATE SET sent = hc.sent + excluded.sent)'
                           ' SELECT coalesce(sum(n.n), 0) FROM n', p.partition, v_layout.time_column)
               INTO v_n USING cutoff, p.partition, parent = 'outbox.history'::regclass;  -- counted: history only
            v_count := v_count + v_n;
        END IF;
    END LOOP;
    EXECUTE format('DELETE FROM %s_default h WHERE h.%I < $1', parent, v_layout.time_column) USING cutoff;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_count + v_n;
END
$fn$;

-- The history's partitions, prepared and retired (outbox.purge, the tests).
CREATE OR REPLACE FUNCTION outbox._history_partitions(OUT partition regclass, OUT from_at timestamptz,
                                                      OUT to_at timestamptz)
    RETURNS SETOF record
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM outbox._partitions('outbox.history')
$fn$;

CREATE OR REPLACE FUNCTION outbox._history_prepare(width_s int)
    RETURNS timestamptz
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT outbox._partitions_prepare('outbox.history', width_s)
$fn$;

CREATE OR REPLACE FUNCTION outbox._history_retire(cutoff timestamptz, exact boolean,
                                                  trim_wider_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT outbox._partitions_retire('outbox.history', cutoff, exact, trim_wider_than)
$fn$;

-- A restore (pg_restore, or psql with a plain dump) brings the time partitions the dump
-- held, each as CREATE TABLE outbox.<name> (...), then ALTER TABLE ONLY <parent> ATTACH
-- PARTITION outbox.<name> FOR VALUES FROM (...) TO (...).  The restored database's
-- worker starts at the restore's CREATE EXTENSION and may have made partitions of its
-- own for the same times by then (_partitions_prepare, at its first round): the restore
-- would fail on a name or a range already taken.  The worker's partitions are still
-- empty then (the messages come later, with the data), and give way: a statement hook in
-- every backend (src/pg/runtime/restored_partitions.cpp) calls these two before such a
-- CREATE TABLE or ATTACH PARTITION, under the partitions' advisory lock, which the
-- worker's _partitions_prepare only tries: the worker's partition of that name or range
-- is then either committed (and seen here) or not begun.  A partition that holds rows,
-- or that the caller does not own, stays, and the statement fails as PostgreSQL makes it.
CREATE OR REPLACE FUNCTION outbox._restore_creates(partition_name text)
    RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT count(*) FILTER (WHERE outbox._partition_drop_if_empty(p.partition))::integer
      FROM unnest(ARRAY['outbox.history', 'outbox.attempts']::regclass[]) parent
     CROSS JOIN LATERAL outbox._partitions(parent) p
      JOIN pg_class c ON c.oid = p.partition
     WHERE c.relname = _restore_creates.partition_name
       AND pg_has_role(c.relowner, 'USAGE')
$fn$;

CREATE OR REPLACE FUNCTION outbox._restore_attaches(parent regclass, from_at timestamptz, to_at timestamptz)
    RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT count(*) FILTER (WHERE outbox._partition_drop_if_empty(p.partition))::integer
      FROM outbox._partitions(parent) p
      JOIN pg_class c ON c.oid = p.partition
     WHERE p.from_at < _restore_attaches.to_at AND p.to_at > _restore_attaches.from_at
       AND pg_has_role(c.relowner, 'USAGE')
$fn$;
