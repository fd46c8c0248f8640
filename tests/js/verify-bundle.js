// node verify-bundle.js BUNDLE PUBLIC_KEY_PEM HINT: a key-signed Sigstore bundle verified offline by sigstore-js
// (an empty trusted root, no transparency log or timestamp asked for); exit 1 naming why when it does not hold
const fs = require('fs');
const crypto = require('crypto');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');
const [bundlePath, keyPath, hint] = process.argv.slice(2);
const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundlePath, 'utf8')));
const der = crypto.createPublicKey(fs.readFileSync(keyPath)).export({ type: 'spki', format: 'der' });
const root = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
const trust = toTrustMaterial(root, { [hint]: { rawBytes: der } });
const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
try {
  verifier.verify(toSignedEntity(bundle));
  console.log('verified');
} catch (e) {
  console.error(`rejected: ${e.code || ''} ${e.message}`);
  process.exit(1);
}
