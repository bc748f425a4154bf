// Asymmetric Standard Webhooks signatures ("v1a", ed25519) checked with Node's own
// crypto, an implementation that is not pg_outbox's.
// stdin:  {"public_key": "whpk_...", "seed": "whsk_..." (optional),
//          "requests": [{"headers": {...}, "body": "..."}, ...]}
// stdout: {"verified": [true | false, ...]}: whether some v1a signature of each request
//         verifies over "<webhook-id>.<webhook-timestamp>.<body>" with the public key;
//         "derived_public_key": the whpk_ key Node derives from the seed, when given.
'use strict';
const crypto = require('crypto');

// A raw 32-byte ed25519 public key as a KeyObject, through its JWK form.
function publicKey(whpk) {
  if (!whpk.startsWith('whpk_')) throw new Error('not a whpk_ key');
  const raw = Buffer.from(whpk.slice('whpk_'.length), 'base64');
  if (raw.length !== 32) throw new Error('an ed25519 public key has 32 bytes');
  return crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

// The public key of a whsk_ secret's seed (its first 32 bytes), as whpk_.
function derivedPublicKey(whsk) {
  const seed = Buffer.from(whsk.slice('whsk_'.length), 'base64').subarray(0, 32);
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
  const key = crypto.createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
  return 'whpk_' + Buffer.from(crypto.createPublicKey(key).export({ format: 'jwk' }).x, 'base64url').toString('base64');
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => (input += chunk));
process.stdin.on('end', () => {
  const { public_key: whpk, seed, requests } = JSON.parse(input);
  const key = publicKey(whpk);
  const verified = requests.map(({ headers, body }) => {
    const content = Buffer.from(`${headers['webhook-id']}.${headers['webhook-timestamp']}.${body}`, 'utf8');
    return (headers['webhook-signature'] || '')
      .split(' ')
      .filter((s) => s.startsWith('v1a,'))
      .some((s) => crypto.verify(null, content, key, Buffer.from(s.slice('v1a,'.length), 'base64')));
  });
  const out = { verified };
  if (seed) out.derived_public_key = derivedPublicKey(seed);
  process.stdout.write(JSON.stringify(out));
});
