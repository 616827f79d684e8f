// A relying party built on panva's openid-client (an OpenID Certified library nobody here
// wrote), driving the provider as a campus web application and its back end would. Run by
// pkg/server's TestCertifiedRelyingParty, which starts the provider and passes it here:
//
//   RP_ISSUER, RP_CLIENT_ID, RP_CLIENT_SECRET   a confidential client (code flow, refresh)
//   RP_CC_CLIENT_ID, RP_CC_CLIENT_SECRET        a client_credentials client with introspection
//   RP_REDIRECT_URI, RP_USERNAME, RP_PASSWORD   the callback and a user of the local directory
//
// Each check prints one line; the first failure exits 1.
import * as client from 'openid-client';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const issuer = new URL(env('RP_ISSUER'));
const redirectURI = env('RP_REDIRECT_URI');
const opts = { execute: [client.allowInsecureRequests] }; // the test's provider speaks http

let failed = false;
const check = (name, ok, detail = '') => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${detail ? ': ' + detail : ''}`);
  if (!ok) failed = true;
};
const errorCode = async (p) => {
  try {
    await p;
    return 'none';
  } catch (e) {
    return e.error ?? e.code ?? String(e);
  }
};

// A browser: a cookie jar over fetch, stopping at the relying party's callback.
class Browser {
  jar = new Map();
  async fetch(url, init = {}) {
    const headers = new Headers(init.headers);
    if (this.jar.size) headers.set('cookie', [...this.jar].map(([k, v]) => `${k}=${v}`).join('; '));
    const resp = await fetch(url, { ...init, headers, redirect: 'manual' });
    for (const c of resp.headers.getSetCookie()) {
      const [pair, ...attrs] = c.split(';');
      const i = pair.indexOf('=');
      const name = pair.slice(0, i).trim();
      if (attrs.some((a) => /max-age=-1|max-age=0\b/i.test(a.trim())) || pair.slice(i + 1) === '') this.jar.delete(name);
      else this.jar.set(name, pair.slice(i + 1));
    }
    return resp;
  }
  // go follows redirects within the provider; it returns the final page, or the redirect to
  // the callback (status 302, location).
  async go(url, init) {
    let resp = await this.fetch(url, init);
    for (let i = 0; i < 10 && resp.status >= 300 && resp.status < 400; i++) {
      const loc = new URL(resp.headers.get('location'), url).toString();
      if (loc.startsWith(redirectURI)) return { status: resp.status, location: loc, body: '' };
      url = loc;
      resp = await this.fetch(url);
    }
    return { status: resp.status, location: resp.headers.get('location') ?? '', body: await resp.text(), url };
  }
}

const unescape = (s) => s.replaceAll('&amp;', '&').replaceAll('&#43;', '+').replaceAll('&#34;', '"').replaceAll('&#39;', "'");
function form(page) {
  const m = page.body.match(/<form[^>]*action="([^"]+)"/);
  if (!m) throw new Error(`no form on the page (${page.status}): ${page.body.slice(0, 300)}`);
  const fields = new URLSearchParams();
  for (const h of page.body.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)) fields.set(h[1], unescape(h[2]));
  return { action: new URL(unescape(m[1]), page.url).toString(), fields };
}
async function submit(b, page, extra) {
  const f = form(page);
  for (const [k, v] of Object.entries(extra)) f.fields.set(k, v);
  return b.go(f.action, { method: 'POST', body: f.fields, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
}

const config = await client.discovery(issuer, env('RP_CLIENT_ID'), env('RP_CLIENT_SECRET'), undefined, opts);
client.enableNonRepudiationChecks(config); // ID tokens' signatures checked against the JWKS
const meta = config.serverMetadata();
check('discovery', meta.issuer === issuer.href && meta.code_challenge_methods_supported?.includes('S256'));
check('discovery advertises back-channel logout', meta.backchannel_logout_supported === true && meta.backchannel_logout_session_supported === true);

// Client credentials.
const cc = await client.discovery(issuer, env('RP_CC_CLIENT_ID'), env('RP_CC_CLIENT_SECRET'), undefined, opts);
const ccTok = await client.clientCredentialsGrant(cc, { scope: 'notification.mp' });
check('client credentials', ccTok.token_type.toLowerCase() === 'bearer' && ccTok.access_token && ccTok.scope === 'notification.mp');

// Code flow with PKCE and nonce, through the login form and the consent page.
async function signIn(b, extra = {}) {
  const verifier = client.randomPKCECodeVerifier();
  const nonce = client.randomNonce();
  const state = client.randomState();
  const url = client.buildAuthorizationUrl(config, {
    redirect_uri: redirectURI, scope: 'openid notification.mp', nonce, state, kc_idp_hint: 'local',
    code_challenge: await client.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256', ...extra,
  });
  let p = await b.go(url.toString());
  if (p.body.includes('name="password"')) p = await submit(b, p, { username: env('RP_USERNAME'), password: env('RP_PASSWORD') });
  if (p.body.includes('name="accept"')) p = await submit(b, p, { accept: 'yes' });
  if (!p.location.startsWith(redirectURI)) throw new Error(`not sent back to the client: ${p.status} ${p.body.slice(0, 300)}`);
  return client.authorizationCodeGrant(config, new URL(p.location), {
    pkceCodeVerifier: verifier, expectedNonce: nonce, expectedState: state, idTokenExpected: true,
  });
}
const b = new Browser();
const tok = await signIn(b);
const claims = tok.claims();
check('code flow with PKCE and nonce, ID token validated', claims.sub === env('RP_USERNAME') && claims.userid === env('RP_USERNAME') && claims.sid && claims.auth_time > 0);
const ui = await client.fetchUserInfo(config, tok.access_token, claims.sub);
check('userinfo', ui.sub === claims.sub && ui.userid === claims.sub);

// Refresh rotation: a new refresh token; the old one used again is refused and revokes the family.
const r1 = await client.refreshTokenGrant(config, tok.refresh_token);
check('refresh rotates', r1.refresh_token && r1.refresh_token !== tok.refresh_token && r1.claims()?.sub === claims.sub);
check('a rotated refresh token is refused', (await errorCode(client.refreshTokenGrant(config, tok.refresh_token))) === 'invalid_grant');
check('its family is revoked', (await errorCode(client.refreshTokenGrant(config, r1.refresh_token))) === 'invalid_grant');

// Introspection and revocation.
const tok2 = await signIn(b); // signed in already: no login, no consent
const intro = await client.tokenIntrospection(config, tok2.access_token);
check('introspection of an access token', intro.active === true && intro.sub === claims.sub && intro.client_id === env('RP_CLIENT_ID'));
check('introspection of a refresh token', (await client.tokenIntrospection(config, tok2.refresh_token)).active === true);
await client.tokenRevocation(config, tok2.refresh_token);
check('revocation', (await client.tokenIntrospection(config, tok2.refresh_token)).active === false &&
  (await errorCode(client.refreshTokenGrant(config, tok2.refresh_token))) === 'invalid_grant');

// Refresh with a narrower scope narrows that answer only (RFC 6749 §6).
const tok3 = await signIn(b);
const narrow = await client.refreshTokenGrant(config, tok3.refresh_token, { scope: 'openid' });
const wide = await client.refreshTokenGrant(config, narrow.refresh_token);
check('a narrower refresh keeps the grant for the next', narrow.scope === 'openid' && wide.scope.split(' ').includes('notification.mp'));

// Re-authentication: prompt=login cannot skip its login by posting to the consent step.
{
  const url = client.buildAuthorizationUrl(config, { redirect_uri: redirectURI, scope: 'openid notification.mp', prompt: 'login', kc_idp_hint: 'local' });
  const login = await b.go(url.toString());
  const f = form(login);
  f.fields.set('accept', 'yes');
  const p = await b.go(f.action.replace('/login-actions/authenticate?', '/login-actions/consent?'), {
    method: 'POST', body: f.fields, headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  check('prompt=login cannot skip to consent', p.status === 400 && !p.location.includes('code='), `${p.status} ${p.location}`);
}

// An access token is no id_token_hint.
{
  const url = client.buildEndSessionUrl(config, { id_token_hint: tok3.access_token, post_logout_redirect_uri: redirectURI });
  const p = await b.go(url.toString());
  check('an access token as id_token_hint is refused', p.status === 400, `${p.status}`);
}

// Keycloak's logout by the client's back end: 204, and the session is over.
{
  const t = await signIn(new Browser());
  const resp = await fetch(meta.end_session_endpoint, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ client_id: env('RP_CLIENT_ID'), client_secret: env('RP_CLIENT_SECRET'), refresh_token: t.refresh_token }),
  });
  check('logout by the client answers 204', resp.status === 204, `${resp.status}`);
  check('and its refresh token no longer refreshes', (await errorCode(client.refreshTokenGrant(config, t.refresh_token))) === 'invalid_grant');
  check('and introspection says inactive', (await client.tokenIntrospection(config, t.access_token)).active === false);
}

// RP-initiated logout with the ID token: back to the application with state; signed out.
{
  const tok4 = await signIn(b);
  const url = client.buildEndSessionUrl(config, { id_token_hint: tok4.id_token, post_logout_redirect_uri: redirectURI, state: 'bye' });
  const p = await b.go(url.toString());
  check('RP-initiated logout', p.status === 302 && p.location === `${redirectURI}?state=bye`, `${p.status} ${p.location}`);
  const none = client.buildAuthorizationUrl(config, { redirect_uri: redirectURI, scope: 'openid', prompt: 'none', state: 'pn' });
  const q = await b.go(none.toString());
  check('signed out: prompt=none gets login_required', new URL(q.location || 'http://x/').searchParams.get('error') === 'login_required', q.location);
  check('and the ID token\'s refresh token is dead', (await errorCode(client.refreshTokenGrant(config, tok4.refresh_token))) === 'invalid_grant');
}

process.exit(failed ? 1 : 0);
