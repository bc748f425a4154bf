-- One shard of a sharded orders service: the business table, the per-customer order
-- counter, the outbox endpoint and place_order(), which writes the order and its
-- message in one transaction. Run it on every shard, each with its own values:
--
--   psql -v shard_name=shard1 -v id_start=1000001 \
--        -v receiver_url=http://127.0.0.1:8080/hooks/orders -f shard.sql
--
-- The server must preload pg_outbox (shared_preload_libraries = 'pg_outbox').
\set ON_ERROR_STOP 1

CREATE EXTENSION pg_outbox;      -- this database's delivery worker starts at once

-- Which shard this is: the messages say so, so a consumer can tell where an order lives.
CREATE TABLE this_shard (name text NOT NULL);
INSERT INTO this_shard VALUES (:'shard_name');

-- Order ids are drawn on the shard; each shard draws from its own range, so an id names
-- one order across the whole service.
CREATE TABLE orders (
    id        bigint GENERATED ALWAYS AS IDENTITY (START WITH :id_start) PRIMARY KEY,
    customer  text        NOT NULL,
    amount    int         NOT NULL,
    seq       int         NOT NULL,          -- the customer's n-th order, in commit order
    placed_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (customer, seq)
);

-- One row per customer: how many orders it has placed here.
CREATE TABLE customer_orders (
    customer text PRIMARY KEY,
    placed   int  NOT NULL
);

-- Messages of one customer are delivered one at a time, in commit order.
SELECT outbox.create_endpoint('orders_feed', url => :'receiver_url', ordered => true);

CREATE FUNCTION place_order(customer text, amount int) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n        int;
    order_id bigint;
BEGIN
    -- The customer's counter row stays locked until this transaction ends: a second order
    -- of the same customer waits here, draws the next number and commits after this one,
    -- so seq numbers a customer's orders in commit order.
    INSERT INTO customer_orders AS c (customer, placed)
    VALUES (place_order.customer, 1)
    ON CONFLICT ON CONSTRAINT customer_orders_pkey DO UPDATE SET placed = c.placed + 1
    RETURNING c.placed INTO n;

    INSERT INTO orders (customer, amount, seq)
    VALUES (place_order.customer, place_order.amount, n)
    RETURNING id INTO order_id;

    -- Same transaction as the order: it is sent if and only if the order commits. The
    -- ordering key is the customer, the key the proxy distributes on.
    PERFORM outbox.enqueue('orders_feed',
        jsonb_build_object('order_id', order_id,
                           'customer', place_order.customer,
                           'seq',      n,
                           'amount',   place_order.amount,
                           'shard',    (SELECT name FROM this_shard)),
        event_type   => 'order.placed',
        ordering_key => place_order.customer);
    RETURN order_id;
END
$$;
