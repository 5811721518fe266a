// Prints HubSpot request-signature test vectors as JSON, computed by
// Signature.getSignature from HubSpot's official @hubspot/api-client.
// See ../../README.md for how to run it.
'use strict';
const { Signature } = require('@hubspot/api-client/lib/src/utils/signature');
const pkg = require('@hubspot/api-client/package.json');

const secret = 'c5a1f7e2-3b4d-4e9a-8f61-0d2c9b7e4a10';
const rotated = 'a9d3e0b8-7c21-4f6e-9b05-3e8d1c4f7a62';
const docSecret = 'yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy';
const batch = '[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]';
const change = '[{"eventId":3892116512,"subscriptionId":2114401,"portalId":62515,"appId":54321,"occurredAt":1767225600123,"subscriptionType":"deal.propertyChange","attemptNumber":2,"objectId":9007199254740993,"propertyName":"dealstage","propertyValue":"closedwon","changeSource":"CRM"}]';
const unicode = '[{"eventId":7,"subscriptionId":9,"portalId":62515,"occurredAt":1767225600000,"subscriptionType":"contact.propertyChange","propertyName":"firstname","propertyValue":"Yllä Øster 東京","objectId":51,"changeSource":"CRM"}]';

// Each case: what goes on the wire (url) and what HubSpot signs (signed_url).
// For v3 HubSpot signs the URI with a fixed set of escapes decoded; the
// decoded form is written out by hand here so the vector does not depend on
// the decoder under test.
const cases = [
  { name: 'v1 documented example body', version: 'v1', secret: docSecret, method: 'POST', url: '', signed_url: '', body: batch },
  { name: 'v2 documented GET example', version: 'v2', secret: docSecret, method: 'GET', url: 'https://www.example.com/webhook_uri', signed_url: 'https://www.example.com/webhook_uri', body: '' },
  { name: 'v2 POST with query', version: 'v2', secret, method: 'POST', url: 'https://hooks.example.com/hooks/crm?portal=62515&x=1', signed_url: 'https://hooks.example.com/hooks/crm?portal=62515&x=1', body: batch },
  { name: 'v1 property change', version: 'v1', secret, method: 'POST', url: '', signed_url: '', body: change },
  { name: 'v3 batch', version: 'v3', secret, method: 'POST', url: 'https://hooks.example.com/hooks/crm', signed_url: 'https://hooks.example.com/hooks/crm', body: batch, timestamp: 1767225600500 },
  { name: 'v3 property change, rotated secret', version: 'v3', secret: rotated, method: 'POST', url: 'https://hooks.example.com/hooks/crm', signed_url: 'https://hooks.example.com/hooks/crm', body: change, timestamp: 1767225601000 },
  { name: 'v3 encoded query', version: 'v3', secret, method: 'POST',
    url: 'https://hooks.example.com/hooks/crm?email=a%40b.com&next=https%3A%2F%2Fx.example%2Fy%3Fz%3D1&tag=%28a%29%2A%21%24%27%2C%3B&q=a%20b&k=v%3Dw%26u',
    signed_url: 'https://hooks.example.com/hooks/crm?email=a@b.com&next=https://x.example/y?z%3D1&tag=(a)*!$\',;&q=a%20b&k=v%3Dw%26u',
    body: batch, timestamp: 1767225602000 },
  { name: 'v3 lowercase escapes', version: 'v3', secret, method: 'POST',
    url: 'https://hooks.example.com/hooks/crm?cb=https%3a%2f%2fx.example',
    signed_url: 'https://hooks.example.com/hooks/crm?cb=https://x.example',
    body: batch, timestamp: 1767225603000 },
  { name: 'v3 unicode body', version: 'v3', secret, method: 'POST', url: 'https://hooks.example.com/hooks/crm', signed_url: 'https://hooks.example.com/hooks/crm', body: unicode, timestamp: 1767225604000 },
  { name: 'v3 workflow GET', version: 'v3', secret, method: 'GET', url: 'https://hooks.example.com/hooks/wf?objectId=51', signed_url: 'https://hooks.example.com/hooks/wf?objectId=51', body: '', timestamp: 1767225605000 },
];

const vectors = cases.map((c) => {
  const opts = { clientSecret: c.secret, requestBody: c.body, url: c.signed_url, timestamp: c.timestamp };
  return { ...c, signature: Signature.getSignature(c.method, c.version, opts) };
});

process.stdout.write(JSON.stringify({
  generator: '@hubspot/api-client ' + pkg.version + ' Signature.getSignature',
  node: process.version,
  vectors,
}, null, 2) + '\n');
