// Serves the built OJS dashboard where it expects to be (same origin as the API, under
// /ojs/admin, see ../shared/clients/README.md) and forwards the API calls it makes to an
// OJS server: `make dev`, or a deployed stack. The dashboard sends no credentials, so
// this process adds "Authorization: Bearer $OJS_ADMIN_KEY" to what it forwards: the key
// stays here, never in the browser, and the API needs no CORS for the dashboard.
//
// Environment: OJS_DASHBOARD_DIST (the build), OJS_URL (default http://127.0.0.1:8080),
// OJS_ADMIN_KEY (optional), OJS_DASHBOARD_PORT (default 8090; 0 picks a free port),
// OJS_DASHBOARD_HOST (default 127.0.0.1). Prints "listening <url>" when ready.
// Node's standard library only.

import http from 'node:http';
import https from 'node:https';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

const dist = process.env.OJS_DASHBOARD_DIST;
const upstream = new URL(process.env.OJS_URL || `http://127.0.0.1:${process.env.OJS_PORT || 8080}`);
const key = process.env.OJS_ADMIN_KEY || '';
const port = Number(process.env.OJS_DASHBOARD_PORT ?? 8090);
const host = process.env.OJS_DASHBOARD_HOST || '127.0.0.1';
const APP = '/ojs/admin';
const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon', '.json': 'application/json',
  '.woff2': 'font/woff2',
};

if (!dist) {
  console.error('dashboard-server: OJS_DASHBOARD_DIST is not set');
  process.exit(2);
}

async function serveApp(req, res, pathname) {
  // Client-side routes (/ojs/admin/queues, ...) get index.html; files their own bytes.
  const rel = decodeURIComponent(pathname.slice(APP.length)).replace(/^\/+/, '');
  const file = path.resolve(dist, rel || 'index.html');
  const inside = file.startsWith(path.resolve(dist) + path.sep);
  let body;
  let type = TYPES[path.extname(file)] || 'application/octet-stream';
  try {
    if (!inside) throw new Error('outside');
    body = await readFile(file);
  } catch {
    body = await readFile(path.join(dist, 'index.html'));
    type = TYPES['.html'];
  }
  res.writeHead(200, { 'content-type': type, 'cache-control': 'no-cache' });
  res.end(body);
}

function forward(req, res) {
  const headers = { ...req.headers, host: upstream.host };
  delete headers.cookie;
  if (key) headers.authorization = `Bearer ${key}`;
  const client = upstream.protocol === 'https:' ? https : http;
  const out = client.request(
    {
      protocol: upstream.protocol, hostname: upstream.hostname, port: upstream.port,
      method: req.method, path: req.url, headers,
    },
    (up) => {
      res.writeHead(up.statusCode || 502, up.headers);
      up.pipe(res);
    },
  );
  out.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'backend_error', message: `OJS server unreachable: ${e.message}` } }));
  });
  req.pipe(out);
}

const server = http.createServer((req, res) => {
  const { pathname } = new URL(req.url, 'http://x');
  if (pathname === '/' || pathname === APP) {
    res.writeHead(302, { location: `${APP}/` });
    res.end();
  } else if (pathname.startsWith(`${APP}/`)) {
    serveApp(req, res, pathname).catch((e) => {
      res.writeHead(500);
      res.end(String(e));
    });
  } else if (pathname.startsWith('/ojs/')) {
    forward(req, res);
  } else {
    res.writeHead(404);
    res.end();
  }
});

server.listen(port, host, () => {
  const { port: p } = server.address();
  console.log(`listening http://${host}:${p}${APP}/ -> ${upstream.origin}${key ? ' (with OJS_ADMIN_KEY)' : ''}`);
});
