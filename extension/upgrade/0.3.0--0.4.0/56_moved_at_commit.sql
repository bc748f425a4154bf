-- 0.4.0: a message moved into another key or endpoint takes its place there at the
-- move's commit, behind the key's messages (extension/src/30_tables.sql,
-- messages_moved_at_commit); in 0.3.0 it headed its new key even when the key had a head.
CREATE CONSTRAINT TRIGGER messages_moved_at_commit
    AFTER UPDATE OF endpoint, ordering_key ON outbox.messages DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL
                       AND (OLD.endpoint IS DISTINCT FROM NEW.endpoint OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key))
    EXECUTE FUNCTION outbox._order_at_commit();
