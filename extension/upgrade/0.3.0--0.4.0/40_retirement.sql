
-- Endpoints that retire themselves (docs/operations.md, Endpoints that retire
-- themselves): why the worker paused an endpoint, since when it has been failing, when
-- an operator last resumed it; and the dead letters a receiver aborted.
ALTER TABLE outbox.endpoints
    ADD COLUMN paused_reason text CONSTRAINT endpoints_paused_reason_check
                                  CHECK (paused_reason IN ('FAILING', 'GONE')),
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN resumed_at    timestamptz;

ALTER TABLE dlq.dead_letters
    DROP CONSTRAINT dead_letters_reason_code_check,
    ADD CONSTRAINT dead_letters_reason_code_check
        CHECK (reason_code IN ('HTTP_CLIENT_ERROR', 'PAYLOAD_TOO_LARGE', 'RETRY_EXHAUSTED', 'ENDPOINT_DROPPED',
                               'INVALID_MESSAGE', 'EGRESS_DENIED', 'ABORTED_BY_RECEIVER',
                               'REJECTED_BY_CONSUMER'));
