// Loaded into a Node.js server under test with `node --require`: writes one JSON line per
// request the process's HTTP servers answered, in the order the answers finished, to the
// file named by PAGENT_HTTP_TRACE: the server's port, the method, the path, the query and
// the body's fields (a form or a JSON object), whether a bearer token came, and the status.
// It only watches: the body's chunks are seen as the server's own reader takes them.
'use strict';
const http = require('node:http');
const fs = require('node:fs');

const file = process.env.PAGENT_HTTP_TRACE;
const emit = http.Server.prototype.emit;

http.Server.prototype.emit = function (event, req, res) {
  if (file && event === 'request') {
    const chunks = [];
    const own = req.emit;
    req.emit = function (name, chunk, ...rest) {
      if (name === 'data') chunks.push(Buffer.from(chunk));
      return own.call(this, name, chunk, ...rest);
    };
    const port = this.address() && this.address().port;
    // Before the server's routers rewrite it.
    const url = new URL(req.url, 'http://trace');
    res.on('finish', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body = null;
      const type = String(req.headers['content-type'] || '');
      if (type.startsWith('application/x-www-form-urlencoded')) {
        body = Object.fromEntries(new URLSearchParams(text));
      } else if (text) {
        try {
          body = JSON.parse(text);
        } catch {
          body = text;
        }
      }
      const line = {
        port,
        method: req.method,
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        body,
        bearer: String(req.headers.authorization || '').startsWith('Bearer '),
        status: res.statusCode,
      };
      fs.appendFileSync(file, JSON.stringify(line) + '\n');
    });
  }
  return emit.apply(this, arguments);
};
