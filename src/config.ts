// Names that src/quota/ and src/token/ still import from here; their homes are
// src/quota/settings.ts and src/config/credentials.ts. Remove once those imports point there.
export { redisDisplayUrl, type RateLimitConfig } from './quota/settings.js'
export { credentialProblem, trimCredential, type CredentialSource } from './config/credentials.js'
