// STATE_DIR: where state that outlives a restart is kept (the quota ledger, under quota/).
// Unset or empty: none. Shown on /status as it is (a path, no secret).
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { configSummary } from '../../src/admin/status.js'

const base = { AUTH_URL: 'https://auth.example.com', UPSTREAM_URL: 'https://api.example.com', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }

t.test('STATE_DIR: unset or empty is none; a path is kept as given and shown on /status', async (t) => {
  t.equal(loadConfig(base).stateDir, '')
  t.equal(loadConfig({ ...base, STATE_DIR: '' }).stateDir, '')
  const config = loadConfig({ ...base, STATE_DIR: '/var/lib/store-auth-proxy' })
  t.equal(config.stateDir, '/var/lib/store-auth-proxy')
  t.equal(configSummary(config).STATE_DIR, '/var/lib/store-auth-proxy')
})
