-- wrk script: the same ~200-byte JSON POST the worker sends, for the raw reference.
wrk.method = "POST"
wrk.body = '{"order_id": 12345, "customer": "c12345", "note": "' .. string.rep("x", 120) .. '"}'
wrk.headers["Content-Type"] = "application/json"
