-- The attempt log (docs/operations.md, The attempt log): its table is created by
-- extension/src/37_attempts.sql, which the update runs as a fresh install does (the
-- Makefile's UPDATE_TABLES).
-- outbox.message(id) gains attempts_logged: a new result column, so dropped here and
-- created again by the replayed 50_messages.sql (its grants come back by 50_give_back_grants.sql).
DROP FUNCTION outbox.message(bigint);
