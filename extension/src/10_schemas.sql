
CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'pg_outbox: messages waiting for delivery and their endpoints';
CREATE SCHEMA dlq;
COMMENT ON SCHEMA dlq IS 'pg_outbox: messages that could not be delivered';

