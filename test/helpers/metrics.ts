import { request } from 'undici'

/** Reads one sample from the admin port's /metrics: the series with exactly these labels, 0 if absent. */
export async function metricValue (adminUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await request(adminUrl + '/metrics')).body.text()
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).sort().join(',')
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null || match[1] !== name) continue
    const have = (match[2] ?? '').split(',').filter((l) => l !== '').sort().join(',')
    if (have === wanted) return Number(match[3])
  }
  return 0
}
