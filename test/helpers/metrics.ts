import { scrape, seriesKey } from './metrics-scrape.js'

/** Reads one sample from the admin port's /metrics: the series with exactly these labels, 0 if absent. */
export async function metricValue (adminUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return (await scrape(adminUrl)).get(seriesKey(name, labels)) ?? 0
}
