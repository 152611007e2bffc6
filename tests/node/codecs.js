// Register kafkajs codecs for snappy (xerial framing, kafkajs-snappy), lz4 (frame format, lz4js)
// and zstd (zstd-codec, WebAssembly): pure-JS packages, so no native build is needed.
'use strict'
const { CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4js = require('lz4js')
const { ZstdCodec } = require('zstd-codec')

function registerCodecs () {
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    async compress (encoder) { return Buffer.from(lz4js.compress(encoder.buffer)) },
    async decompress (buffer) { return Buffer.from(lz4js.decompress(buffer)) }
  })
  return new Promise(resolve => ZstdCodec.run(zstd => {
    const simple = new zstd.Simple()
    CompressionCodecs[CompressionTypes.ZSTD] = () => ({
      async compress (encoder) { return Buffer.from(simple.compress(encoder.buffer)) },
      async decompress (buffer) { return Buffer.from(simple.decompress(buffer)) }
    })
    resolve()
  }))
}

module.exports = { registerCodecs }
