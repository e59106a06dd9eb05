const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');
const [target, protoPath] = process.argv.slice(2);
const definition = loader.loadSync(protoPath, {keepCase: true, longs: String, defaults: true});
const Vectors = grpc.loadPackageDefinition(definition).vectors.v1.Vectors;
const client = new Vectors(target, grpc.credentials.createInsecure());
const out = {};
function md(m) { return m ? m.getMap() : null; }
function search(request) {
  return new Promise((resolve) => {
    const meta = new grpc.Metadata();
    meta.add('authorization', 'Bearer node-secret-9');
    let initial = null;
    const call = client.Search(request, meta, (error, reply) => {
      resolve(error ? {code: error.code, details: error.details, trailing: md(error.metadata)}
                    : {reply, initial});
    });
    call.on('metadata', (m) => { initial = md(m); });
  });
}
function scroll(request) {
  return new Promise((resolve) => {
    const points = [];
    const call = client.Scroll(request);
    call.on('data', (p) => points.push(p));
    call.on('status', (s) => resolve({points, code: s.code, trailing: md(s.metadata)}));
    call.on('error', () => {});
  });
}
(async () => {
  out.search = await search({collection: 'docs', vector: [0.25], limit: 2});
  out.exhausted = await search({collection: 'full'});
  out.scroll = await scroll({collection: 'k', count: 3});
  console.log(JSON.stringify(out));
  client.close();
})();
