// The explorer's bulk data: zlib-compressed, base64-encoded columns of
// LEB128 varints, written by analyzer/src/print/html/data.rs with the trace
// format's varint codec. The browser inflates them itself
// (DecompressionStream), so the page loads nothing.
/* exported decode */
const decode = (() => {
  // Standard base64 to bytes.
  function base64Bytes(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // The bytes of a zlib stream.
  async function inflate(compressed) {
    const stream = new Blob([compressed]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  // Columns of unsigned varints, in the order and of the lengths that
  // `columns` ([name, length] pairs) lists: each a Float64Array by name.
  // Doubles hold every value up to 2^53 exactly; the page's values (bytes,
  // nanoseconds, indices) stay below that.
  function readColumns(bytes, columns) {
    let at = 0;
    const out = {};
    for (const [name, length] of columns) {
      const values = new Float64Array(length);
      for (let i = 0; i < length; i++) {
        let value = 0, scale = 1, byte;
        do { byte = bytes[at++]; value += (byte & 127) * scale; scale *= 128; } while (byte & 128);
        values[i] = value;
      }
      out[name] = values;
    }
    return out;
  }

  // The signed value of a zigzag-encoded one.
  const unzigzag = (v) => (v % 2 === 0 ? v / 2 : -(v + 1) / 2);

  // The data's columns, from the base64 text of the page's bulk.
  async function columns(bulkText, columnList) {
    return readColumns(await inflate(base64Bytes(bulkText.trim())), columnList);
  }

  return { base64Bytes, inflate, readColumns, unzigzag, columns };
})();
