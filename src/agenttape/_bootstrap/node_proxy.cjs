// Loaded into Node processes by agenttape run (NODE_OPTIONS=--require ...): Node's built-in
// fetch (undici) ignores HTTPS_PROXY before Node 24 (and 22.21) even with
// NODE_USE_ENV_PROXY=1, so fetch is sent through the recording proxy here. Every connection
// fetch opens becomes a CONNECT tunnel through the proxy; TLS inside it is verified as usual
// (NODE_EXTRA_CA_CERTS holds the agenttape CA). Nothing changes when no proxy is set, or
// when this Node has no global fetch.
'use strict';

(function installAgenttapeProxy() {
  const proxyText = process.env.HTTPS_PROXY || process.env.https_proxy || process.env.HTTP_PROXY || process.env.http_proxy;
  if (!proxyText || typeof globalThis.Response !== 'function') return;
  let proxy;
  try {
    proxy = new URL(proxyText);
  } catch {
    return;
  }
  const net = require('node:net');
  const tls = require('node:tls');
  // Reading a lazily defined fetch global loads Node's bundled undici, which sets its Agent:
  // under the first symbol up to Node 22; from Node 24 (undici 7) under the second, the first
  // then holding a wrapper of it for older undici copies.
  const legacyKey = Symbol.for('undici.globalDispatcher.1');
  const key = Symbol.for('undici.globalDispatcher.2');
  const current = globalThis[key] || globalThis[legacyKey];
  if (!current || typeof current.constructor !== 'function') return;
  const Agent = current.constructor;

  function connect(options, callback) {
    const secure = options.protocol === 'https:';
    const port = options.port || (secure ? 443 : 80);
    const host = options.hostname.includes(':') && !options.hostname.startsWith('[') ? `[${options.hostname}]` : options.hostname;
    const target = `${host}:${port}`;
    const socket = net.connect(Number(proxy.port || 80), proxy.hostname.replace(/^\[|\]$/g, ''));
    let settled = false;
    const settle = (error, result) => {
      if (settled) return;
      settled = true;
      if (error) socket.destroy();
      callback(error, result);
    };
    socket.setNoDelay(true);
    socket.once('error', (error) => settle(error));
    socket.once('connect', () => {
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    });
    let head = Buffer.alloc(0);
    const onData = (chunk) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.removeListener('data', onData);
      const statusLine = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      if (statusLine.split(' ')[1] !== '200') {
        settle(new Error(`the recording proxy refused CONNECT ${target}: ${statusLine}`));
        return;
      }
      if (!secure) {
        settle(null, socket);
        return;
      }
      // The certificate is checked against `host`: without it Node checks "localhost", and an
      // IP-literal URL (https://127.0.0.1:8443) fails with ERR_TLS_CERT_ALTNAME_INVALID. SNI
      // carries names only, never an address.
      const bare = options.hostname.replace(/^\[|\]$/g, '');
      const servername = net.isIP(bare) ? undefined : options.servername || bare;
      const tlsSocket = tls.connect({ socket, host: bare, servername, ALPNProtocols: ['http/1.1'] });
      tlsSocket.once('error', (error) => settle(error));
      tlsSocket.once('secureConnect', () => settle(null, tlsSocket));
    };
    socket.on('data', onData);
  }

  const agent = new Agent({ connect });
  if (globalThis[key]) {
    const Wrapper = globalThis[legacyKey] && globalThis[legacyKey].constructor;
    globalThis[key] = agent;
    if (typeof Wrapper === 'function') globalThis[legacyKey] = new Wrapper(agent);
  } else {
    globalThis[legacyKey] = agent;
  }
})();
