// Standard Webhooks' own verifier (npm standardwebhooks) on what a receiver got.
// stdin:  {"secret": "whsec_...", "requests": [{"headers": {...}, "body": "..."}, ...]}
// stdout: {"verified": [true | false, ...]}, one per request: whether Webhook.verify
//         accepts its webhook-id, webhook-timestamp and webhook-signature with the secret.
'use strict';
const { Webhook } = require('standardwebhooks');

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => (input += chunk));
process.stdin.on('end', () => {
  const { secret, requests } = JSON.parse(input);
  const webhook = new Webhook(secret);
  const verified = requests.map(({ headers, body }) => {
    try {
      webhook.verify(body, {
        'webhook-id': headers['webhook-id'],
        'webhook-timestamp': headers['webhook-timestamp'],
        'webhook-signature': headers['webhook-signature'],
      });
      return true;
    } catch (e) {
      return false;
    }
  });
  process.stdout.write(JSON.stringify({ verified }));
});
