-- 0.4.0: the next message of a key whose head was deleted by anyone but the worker is
-- promoted once per key and DELETE statement, not once per row
-- (extension/src/30_tables.sql, messages_heads_gone).  After the replayed files, which
-- define outbox._heads_gone().
DROP TRIGGER messages_next_in_order ON outbox.messages;
CREATE TRIGGER messages_next_in_order
    AFTER UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL AND outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._next_in_order();
CREATE TRIGGER messages_heads_gone
    AFTER DELETE ON outbox.messages REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT WHEN (outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._heads_gone();
