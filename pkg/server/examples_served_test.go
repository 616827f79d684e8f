package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"
)

// servedExample fetches the served OpenAPI description from base and returns the value of
// the named example of an operation's answer.
func servedExample(t *testing.T, base, path, method, status, name string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/v1/meta/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	op := mapOf(mapOf(mapOf(doc["paths"])[path])[method])
	r := mapOf(mapOf(op["responses"])[status])
	for _, mt := range mapOf(r["content"]) {
		if ex := mapOf(mapOf(mapOf(mt)["examples"])[name]); ex != nil {
			return mapOf(ex["value"])
		}
	}
	t.Fatalf("no example %s of %s %s %s", name, method, path, status)
	return nil
}

// TestUserinfoExampleIsTheAnswer: the served description's userinfo example, for user
// 2020000001, is what userinfo answers for that user (sub is the user number).
func TestUserinfoExampleIsTheAnswer(t *testing.T) {
	e := newSignInEnv(t)
	r := newRP(t, e)
	b := browser(t)
	state, verifier := random(), oauth2.GenerateVerifier()
	auth := r.conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("kc_idp_hint", "local"))
	login := get(t, b, auth)
	consent := submit(t, b, login, url.Values{"username": {userID}, "password": {userPass}})
	q := callback(t, submit(t, b, consent, url.Values{"accept": {"yes"}}))
	tok, err := r.conf.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, e.issuer+"/protocol/openid-connect/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("userinfo %d %s", resp.StatusCode, raw)
	}
	want := servedExample(t, e.base, "/auth/realms/{realm}/protocol/openid-connect/userinfo", "get", "200", "user")
	if want["userid"] != userID {
		t.Fatalf("the example is of user %v, not %s", want["userid"], userID)
	}
	if d := sameJSON(want, got, ""); len(d) > 0 {
		t.Errorf("userinfo of %s answers otherwise than the served example:\n  %s\n  example: %v\n  answer:  %s", userID, strings.Join(d, "\n  "), want, raw)
	}
}

// TestUnknownRealmExampleOfTheAccountPage: the account page's 404 example (unknownRealm) is
// what GET /auth/realms/other/account answers.
func TestUnknownRealmExampleOfTheAccountPage(t *testing.T) {
	e := newSignInEnv(t)
	want := servedExample(t, e.base, "/auth/realms/{realm}/account", "get", "404", "unknownRealm")
	resp, err := http.Get(e.base + "/auth/realms/other/account")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /auth/realms/other/account: %d %s", resp.StatusCode, raw)
	}
	if d := sameJSON(want, got, ""); len(d) > 0 {
		t.Errorf("GET /auth/realms/other/account answers otherwise than the example unknownRealm:\n  %s\n  answer: %s", strings.Join(d, "\n  "), raw)
	}
}
