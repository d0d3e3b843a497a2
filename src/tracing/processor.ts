// Finished spans on their way to the collector: a bounded queue, exported in batches, one
// export at a time, never on a request's path. A collector that is down, slow or refusing
// costs at most the queue (OTEL_BSP_MAX_QUEUE_SIZE spans); what does not fit, or fails to
// export, is dropped and counted (store_auth_proxy_trace_spans_dropped_total). The SDK's
// BatchSpanProcessor behaves alike but keeps its drop count to itself.
import type { Context } from '@opentelemetry/api'
import { ExportResultCode, type ExportResult } from '@opentelemetry/core'
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace'

export interface QueueOptions {
  scheduleDelayMs: number
  maxQueueSize: number
  maxExportBatchSize: number
  /** A span dropped: the queue was full, or its export failed. */
  dropped: (reason: 'queue_full' | 'export_failed', count: number) => void
  exported: (count: number) => void
}

export function createQueueProcessor (exporter: SpanExporter, options: QueueOptions): SpanProcessor {
  const { scheduleDelayMs, maxQueueSize, maxExportBatchSize, dropped, exported } = options
  let queue: ReadableSpan[] = []
  let timer: NodeJS.Timeout | undefined
  let exporting: Promise<void> | undefined
  let closed = false

  function exportBatch (): Promise<void> {
    const batch = queue.slice(0, maxExportBatchSize)
    queue = queue.slice(batch.length)
    return new Promise<void>((resolve) => {
      exporter.export(batch, (result: ExportResult) => {
        if (result.code === ExportResultCode.SUCCESS) exported(batch.length)
        else dropped('export_failed', batch.length)
        resolve()
      })
    })
  }

  /** Exports what is queued, one batch at a time; then waits for more. */
  function drain (): void {
    if (exporting !== undefined || queue.length === 0) return
    exporting = exportBatch().finally(() => {
      exporting = undefined
      if (queue.length >= maxExportBatchSize) drain()
      else arm()
    })
  }

  function arm (): void {
    if (timer !== undefined || closed || queue.length === 0) return
    timer = setTimeout(() => {
      timer = undefined
      drain()
    }, scheduleDelayMs).unref()
  }

  return {
    onStart (_span: Span, _context: Context): void {},
    onEnd (span: ReadableSpan): void {
      if (closed || (span.spanContext().traceFlags & 1) === 0) return
      if (queue.length >= maxQueueSize) {
        dropped('queue_full', 1)
        return
      }
      queue.push(span)
      if (queue.length >= maxExportBatchSize) drain()
      else arm()
    },
    async forceFlush (): Promise<void> {
      while (exporting !== undefined || queue.length > 0) {
        if (exporting === undefined) drain()
        await exporting
      }
    },
    async shutdown (): Promise<void> {
      closed = true
      clearTimeout(timer)
      await this.forceFlush()
      await exporter.shutdown()
    }
  }
}
