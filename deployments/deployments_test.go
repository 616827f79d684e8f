// Package deployments holds the compose file, Kubernetes manifests and Dockerfiles of the
// service. Its test reads them as the tools that run them would and checks them against each
// other and against the configuration rules of pkg/config; nothing is built or started.
package deployments

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/campus-it/ucs/pkg/config"
)

// Names the manifests are expected to use; everything else is derived from the files.
const (
	k8sDir        = "k8s"
	kustomization = "kustomization.yaml"
	apiDeployment = "ucs-api"
	workerDeploy  = "ucs-worker"
	configMount   = "/etc/ucs"
	configPath    = "/etc/ucs/config.yaml"
	composeFile   = "compose.yaml"
	composeConfig = "config.compose.yaml"
	dashboardFile = "grafana/ucs-dashboard.json"
	metricsSource = "../pkg/metrics/metrics.go"
	// minGrace is the least terminationGracePeriodSeconds of a Deployment, Kubernetes' default;
	// each must also exceed its preStop plus shutdown_grace, within which the programs stop.
	minGrace = 30
)

// object is one YAML document of a manifest file.
type object struct {
	file string
	doc  map[string]any
}

func (o object) kind() string { return str(dig(o.doc, "kind")) }
func (o object) name() string { return str(dig(o.doc, "metadata", "name")) }
func (o object) String() string {
	return fmt.Sprintf("%s: %s %q", o.file, o.kind(), o.name())
}

// dig walks maps by string keys and lists by int indexes; nil when the path does not exist.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func mapping(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// decodeAll reads every document of a YAML stream, skipping empty ones.
func decodeAll(t *testing.T, file string, b []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d is not valid YAML: %v", file, i+1, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// manifests are the Kubernetes objects of k8s/, in file order.
type manifests struct {
	objects []object
	kust    map[string]any
	files   []string // the .yaml files of k8s/ other than the kustomization
}

func loadK8s(t *testing.T) manifests {
	t.Helper()
	var m manifests
	entries, err := os.ReadDir(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(k8sDir, n)
		docs := decodeAll(t, p, readFile(t, p))
		if n == kustomization {
			if len(docs) != 1 {
				t.Fatalf("%s: want one document, found %d", p, len(docs))
			}
			m.kust = docs[0]
			continue
		}
		m.files = append(m.files, n)
		if len(docs) == 0 {
			t.Errorf("%s: holds no Kubernetes object", p)
		}
		for _, d := range docs {
			m.objects = append(m.objects, object{file: p, doc: d})
		}
	}
	if m.kust == nil {
		t.Fatalf("%s/%s is missing", k8sDir, kustomization)
	}
	return m
}

func (m manifests) find(kind, name string) (object, bool) {
	for _, o := range m.objects {
		if o.kind() == kind && o.name() == name {
			return o, true
		}
	}
	return object{}, false
}

func (m manifests) mustFind(t *testing.T, kind, name string) object {
	t.Helper()
	o, ok := m.find(kind, name)
	if !ok {
		t.Fatalf("no %s named %q in %s/", kind, name, k8sDir)
	}
	return o
}

func (m manifests) ofKind(kind string) []object {
	var out []object
	for _, o := range m.objects {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// secretValue returns key of the Secret name from stringData, or data decoded.
func (m manifests) secretValue(name, key string) (string, bool) {
	o, ok := m.find("Secret", name)
	if !ok {
		return "", false
	}
	if v, ok := mapping(dig(o.doc, "stringData"))[key]; ok {
		return str(v), true
	}
	if v, ok := mapping(dig(o.doc, "data"))[key]; ok {
		b, err := base64.StdEncoding.DecodeString(str(v))
		return string(b), err == nil
	}
	return "", false
}

func TestObjectsHaveIdentityAndNamespace(t *testing.T) {
	m := loadK8s(t)
	ns := str(m.kust["namespace"])
	if ns == "" {
		t.Fatalf("%s: namespace is not set", kustomization)
	}
	nsObj, ok := m.find("Namespace", ns)
	if !ok {
		t.Errorf("no Namespace object named %q (the kustomization's namespace)", ns)
	}
	for _, o := range m.objects {
		for _, f := range []string{"apiVersion", "kind"} {
			if str(o.doc[f]) == "" {
				t.Errorf("%s: document without %s", o, f)
			}
		}
		if o.name() == "" {
			t.Errorf("%s: metadata.name is missing", o)
		}
		if o.kind() == "Namespace" {
			if o.doc["metadata"] != nil && o.name() != ns {
				t.Errorf("%s: a second namespace; everything belongs in %q", o, ns)
			}
			continue
		}
		if got := str(dig(o.doc, "metadata", "namespace")); got != ns {
			t.Errorf("%s: metadata.namespace is %q, want %q", o, got, ns)
		}
	}
	if ok && str(dig(nsObj.doc, "metadata", "labels", "pod-security.kubernetes.io/enforce")) != "restricted" {
		t.Errorf("%s: want label pod-security.kubernetes.io/enforce: restricted", nsObj)
	}
}

func TestKustomizationListsEveryFile(t *testing.T) {
	m := loadK8s(t)
	var listed []string
	seen := map[string]bool{}
	for _, r := range list(m.kust["resources"]) {
		s := str(r)
		if seen[s] {
			t.Errorf("%s: %s listed twice", kustomization, s)
		}
		seen[s] = true
		listed = append(listed, s)
	}
	for _, f := range m.files {
		if !seen[f] {
			t.Errorf("%s: %s is in %s/ but not in resources", kustomization, f, k8sDir)
		}
	}
	for _, r := range listed {
		if !slices.Contains(m.files, r) {
			t.Errorf("%s: resource %s is not a file of %s/", kustomization, r, k8sDir)
		}
	}
	for i, img := range list(m.kust["images"]) {
		if tag := str(dig(img, "newTag")); tag == "" || tag == "latest" {
			t.Errorf("%s: images[%d] (%s): newTag %q, want a release tag", kustomization, i, str(dig(img, "name")), tag)
		}
	}
}

// labelsMatch reports whether every selector label is among the labels.
func labelsMatch(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

func podSpec(o object) map[string]any { return mapping(dig(o.doc, "spec", "template", "spec")) }

func containers(o object) []map[string]any {
	var out []map[string]any
	for _, f := range []string{"initContainers", "containers"} {
		for _, c := range list(podSpec(o)[f]) {
			out = append(out, mapping(c))
		}
	}
	return out
}

func TestDeploymentsAreHardened(t *testing.T) {
	m := loadK8s(t)
	deps := m.ofKind("Deployment")
	if len(deps) == 0 {
		t.Fatal("no Deployment in the manifests")
	}
	for _, d := range deps {
		sel := mapping(dig(d.doc, "spec", "selector", "matchLabels"))
		labels := mapping(dig(d.doc, "spec", "template", "metadata", "labels"))
		if !labelsMatch(sel, labels) {
			t.Errorf("%s: spec.selector.matchLabels %v do not match the pod template's labels %v", d, sel, labels)
		}
		pod := podSpec(d)
		podSC := mapping(pod["securityContext"])
		if len(containers(d)) == 0 {
			t.Errorf("%s: no containers", d)
		}
		for _, c := range containers(d) {
			at := fmt.Sprintf("%s container %q", d, str(c["name"]))
			for _, kind := range []string{"requests", "limits"} {
				for _, res := range []string{"cpu", "memory"} {
					if str(dig(c, "resources", kind, res)) == "" {
						t.Errorf("%s: resources.%s.%s is not set", at, kind, res)
					}
				}
			}
			sc := mapping(c["securityContext"])
			if dig(sc, "runAsNonRoot") != true && !(dig(podSC, "runAsNonRoot") == true && dig(sc, "runAsNonRoot") == nil) {
				t.Errorf("%s: runAsNonRoot is not true", at)
			}
			if dig(sc, "readOnlyRootFilesystem") != true {
				t.Errorf("%s: securityContext.readOnlyRootFilesystem is not true", at)
			}
			if dig(sc, "allowPrivilegeEscalation") != false {
				t.Errorf("%s: securityContext.allowPrivilegeEscalation is not false", at)
			}
			if !slices.ContainsFunc(list(dig(sc, "capabilities", "drop")), func(v any) bool { return str(v) == "ALL" }) {
				t.Errorf("%s: securityContext.capabilities.drop does not hold ALL", at)
			}
			if len(list(dig(sc, "capabilities", "add"))) > 0 {
				t.Errorf("%s: securityContext.capabilities.add is not empty", at)
			}
			seccomp := str(dig(sc, "seccompProfile", "type"))
			if seccomp == "" {
				seccomp = str(dig(podSC, "seccompProfile", "type"))
			}
			if seccomp != "RuntimeDefault" && seccomp != "Localhost" {
				t.Errorf("%s: seccompProfile.type is %q, want RuntimeDefault", at, seccomp)
			}
			if err := checkImageRef(str(c["image"])); err != nil {
				t.Errorf("%s: %v", at, err)
			}
			checkConfigWiring(t, m, d, c, at)
			checkMemoryLimit(t, c, at)
		}
	}
}

// checkMemoryLimit wants GOMEMLIMIT set to between 80% and 95% of the container's memory limit,
// so that the collector works harder near the limit instead of the process being killed at it.
func checkMemoryLimit(t *testing.T, c map[string]any, at string) {
	t.Helper()
	limit, err := k8sBytes(str(dig(c, "resources", "limits", "memory")))
	if err != nil {
		t.Errorf("%s: resources.limits.memory: %v", at, err)
		return
	}
	e, ok := envVar(c, "GOMEMLIMIT")
	if !ok {
		t.Errorf("%s: env GOMEMLIMIT is not set (the Go runtime does not read the container's memory limit)", at)
		return
	}
	soft, err := goMemLimit(str(e["value"]))
	if err != nil {
		t.Errorf("%s: GOMEMLIMIT: %v", at, err)
		return
	}
	if r := float64(soft) / float64(limit); r < 0.8 || r > 0.95 {
		t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of limits.memory %d bytes, want 80%% to 95%%", at, str(e["value"]), 100*r, limit)
	}
}

// k8sBytes reads a Kubernetes memory quantity with a binary or decimal suffix, or none.
func k8sBytes(q string) (int64, error) {
	return scaled(q, map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 1e3, "M": 1e6, "G": 1e9, "": 1})
}

// goMemLimit reads GOMEMLIMIT as the Go runtime does: a byte count with an optional B, KiB,
// MiB, GiB or TiB suffix.
func goMemLimit(v string) (int64, error) {
	return scaled(v, map[string]int64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "": 1})
}

// scaled reads a whole number followed by one of the suffixes of units.
func scaled(v string, units map[string]int64) (int64, error) {
	i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(v)
	}
	n, err := strconv.ParseInt(v[:i], 10, 64)
	unit, ok := units[v[i:]]
	if err != nil || !ok || n <= 0 {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	return n * unit, nil
}

// checkImageRef wants an explicit tag other than latest, or a digest.
func checkImageRef(ref string) error {
	if ref == "" {
		return errors.New("no image")
	}
	if strings.Contains(ref, "@sha256:") {
		return nil
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 {
		return fmt.Errorf("image %q has no tag (it would mean :latest)", ref)
	}
	if tag := last[i+1:]; tag == "" || tag == "latest" {
		return fmt.Errorf("image %q: use a release tag, not %q", ref, tag)
	}
	return nil
}

// checkConfigWiring wants the configuration file mounted where the image's ENTRYPOINT reads it,
// and NATS_URL and MONGODB_URI taken from Secrets that exist and have the key.
func checkConfigWiring(t *testing.T, m manifests, d object, c map[string]any, at string) {
	t.Helper()
	if _, _, err := mountedConfig(m, d, c); err != nil {
		t.Errorf("%s: %v", at, err)
	}
	for _, name := range []string{"NATS_URL", "MONGODB_URI"} {
		e, ok := envVar(c, name)
		if !ok {
			t.Errorf("%s: env %s is not set", at, name)
			continue
		}
		ref := mapping(dig(e, "valueFrom", "secretKeyRef"))
		if ref == nil {
			t.Errorf("%s: env %s must come from a Secret (valueFrom.secretKeyRef): it may hold credentials", at, name)
			continue
		}
		if _, ok := m.secretValue(str(ref["name"]), str(ref["key"])); !ok {
			t.Errorf("%s: env %s refers to Secret %q key %q, which no manifest defines", at, name, str(ref["name"]), str(ref["key"]))
		}
	}
}

func envVar(c map[string]any, name string) (map[string]any, bool) {
	for _, e := range list(c["env"]) {
		if str(dig(e, "name")) == name {
			return mapping(e), true
		}
	}
	return nil, false
}

// mountedConfig finds the Secret (or ConfigMap) and key mounted as /etc/ucs/config.yaml.
func mountedConfig(m manifests, d object, c map[string]any) (kind, name string, err error) {
	var vol string
	for _, vm := range list(c["volumeMounts"]) {
		mp := strings.TrimRight(str(dig(vm, "mountPath")), "/")
		switch {
		case mp == configMount:
			vol = str(dig(vm, "name"))
		case mp == configPath && str(dig(vm, "subPath")) == "config.yaml":
			vol = str(dig(vm, "name"))
		}
	}
	if vol == "" {
		return "", "", fmt.Errorf("nothing is mounted at %s, where the image reads %s", configMount, configPath)
	}
	for _, v := range list(podSpec(d)["volumes"]) {
		if str(dig(v, "name")) != vol {
			continue
		}
		kind, name = "Secret", str(dig(v, "secret", "secretName"))
		items := list(dig(v, "secret", "items"))
		if name == "" {
			kind, name = "ConfigMap", str(dig(v, "configMap", "name"))
			items = list(dig(v, "configMap", "items"))
		}
		if name == "" {
			return "", "", fmt.Errorf("volume %q mounted at %s is neither a Secret nor a ConfigMap", vol, configMount)
		}
		key := "config.yaml"
		if len(items) > 0 {
			key = ""
			for _, it := range items {
				if str(dig(it, "path")) == "config.yaml" {
					key = str(dig(it, "key"))
				}
			}
			if key == "" {
				return "", "", fmt.Errorf("volume %q has no item with path config.yaml", vol)
			}
		}
		if _, ok := m.find(kind, name); !ok {
			return "", "", fmt.Errorf("volume %q refers to %s %q, which no manifest defines", vol, kind, name)
		}
		if kind == "Secret" {
			if _, ok := m.secretValue(name, key); !ok {
				return "", "", fmt.Errorf("Secret %q has no key %q", name, key)
			}
		} else if _, ok := mapping(dig(m.docOf(kind, name), "data"))[key]; !ok {
			return "", "", fmt.Errorf("ConfigMap %q has no key %q", name, key)
		}
		return kind, name + "/" + key, nil
	}
	return "", "", fmt.Errorf("volume %q is mounted but not defined", vol)
}

// docOf is the document of the object, or nil.
func (m manifests) docOf(kind, name string) map[string]any {
	o, _ := m.find(kind, name)
	return o.doc
}

// k8sConfig returns the configuration the api Deployment mounts, parsed, with NATS_URL and
// MONGODB_URI applied as its environment sets them, and defaults filled.
func k8sConfig(t *testing.T, m manifests) *config.Config {
	t.Helper()
	return deploymentConfig(t, m, apiDeployment)
}

// deploymentConfig returns the configuration the named Deployment's (last) container mounts,
// parsed with config.Parse, with NATS_URL and MONGODB_URI applied as its environment sets them,
// and defaults filled.
func deploymentConfig(t *testing.T, m manifests, deployment string) *config.Config {
	t.Helper()
	d := m.mustFind(t, "Deployment", deployment)
	cs := containers(d)
	if len(cs) == 0 {
		t.Fatalf("%s: no containers", d)
	}
	kind, ref, err := mountedConfig(m, d, cs[len(cs)-1])
	if err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	name, key, _ := strings.Cut(ref, "/")
	var text string
	if kind == "Secret" {
		text, _ = m.secretValue(name, key)
	} else {
		text = str(dig(m.docOf(kind, name), "data", key))
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s %s key %s: %v", kind, name, key, err)
	}
	env := map[string]string{}
	for _, n := range []string{"NATS_URL", "MONGODB_URI"} {
		e, _ := envVar(cs[len(cs)-1], n)
		if v := str(e["value"]); v != "" {
			env[n] = v
		} else if ref := mapping(dig(e, "valueFrom", "secretKeyRef")); ref != nil {
			env[n], _ = m.secretValue(str(ref["name"]), str(ref["key"]))
		}
	}
	cfg.ApplyEnv(func(k string) string { return env[k] })
	cfg.Defaults()
	return cfg
}

func validateBothRoles(t *testing.T, where string, cfg *config.Config) {
	t.Helper()
	for _, r := range []struct {
		name string
		role config.Role
	}{{"api", config.RoleAPI}, {"worker", config.RoleWorker}} {
		if err := cfg.Validate(r.role); err != nil {
			t.Errorf("%s: the %s would refuse to start: %v", where, r.name, err)
		}
	}
}

func TestKubernetesConfigIsValid(t *testing.T) {
	m := loadK8s(t)
	cfg := k8sConfig(t, m)
	// The placeholder callback token fails closed: no platform console takes it, and the
	// front end does not start with it, where it would take callbacks anyone can sign.
	if err := cfg.Validate(config.RoleAPI); err == nil || !strings.Contains(err.Error(), "platform.callback_token") {
		t.Errorf("the front end starts with the placeholder callback token: %v", err)
	}
	cfg.Platform.CallbackToken = "TokenSetByTheOperator"
	validateBothRoles(t, "configuration mounted by "+apiDeployment+", its callback token set", cfg)
	if cfg.NATS.Replicas != 3 {
		t.Errorf("nats.replicas is %d: production runs a 3-node JetStream cluster with stream replicas 3", cfg.NATS.Replicas)
	}
	if u, err := url.Parse(cfg.MongoDB.URI); err != nil || u.Query().Get("replicaSet") == "" {
		t.Errorf("MONGODB_URI %q names no replicaSet: production MongoDB is a replica set", redact(cfg.MongoDB.URI))
	}
	if u, err := url.Parse(cfg.MongoDB.URI); err != nil || u.Query().Get("w") != "majority" {
		t.Errorf("MONGODB_URI %q does not set the write concern w=majority", redact(cfg.MongoDB.URI))
	}
	if cfg.Log.Format != "json" {
		t.Errorf("log.format is %q: the cluster's log collector reads json", cfg.Log.Format)
	}
	// Both Deployments must read the same file, or the ScaledObject could watch a consumer the
	// workers do not use.
	w := m.mustFind(t, "Deployment", workerDeploy)
	a := m.mustFind(t, "Deployment", apiDeployment)
	_, wref, werr := mountedConfig(m, w, containers(w)[0])
	_, aref, aerr := mountedConfig(m, a, containers(a)[0])
	if werr == nil && aerr == nil && wref != aref {
		t.Errorf("api mounts %s but worker mounts %s: both must read one configuration", aref, wref)
	}
}

func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// containerPort resolves a probe's or Service's port (number or name) against the container.
func containerPort(c map[string]any, port any) (int, bool) {
	if n, ok := port.(int); ok {
		return n, true
	}
	if n, err := strconv.Atoi(str(port)); err == nil {
		return n, true
	}
	for _, p := range list(c["ports"]) {
		if str(dig(p, "name")) == str(port) {
			n, ok := dig(p, "containerPort").(int)
			return n, ok
		}
	}
	return 0, false
}

func TestAPIProbesPortsAndGrace(t *testing.T) {
	m := loadK8s(t)
	cfg := k8sConfig(t, m)
	d := m.mustFind(t, "Deployment", apiDeployment)
	cs := list(podSpec(d)["containers"])
	if len(cs) != 1 {
		t.Fatalf("%s: want one container, found %d", d, len(cs))
	}
	c := mapping(cs[0])
	listen := cfg.Listen
	if v, ok := listenFlag(t, "api", c); ok {
		listen = v
	}
	_, portText, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("listen %q: %v", listen, err)
	}
	listenPort, _ := strconv.Atoi(portText)
	cfg.Listen = listen
	if n, _ := dig(d.doc, "spec", "replicas").(int); n < 2 {
		t.Errorf("%s: spec.replicas is %v, want at least 2 (3 in production)", d, dig(d.doc, "spec", "replicas"))
	}
	var declared []int
	for _, p := range list(c["ports"]) {
		n, _ := dig(p, "containerPort").(int)
		declared = append(declared, n)
	}
	if !slices.Contains(declared, listenPort) {
		t.Errorf("%s: container ports %v do not include %d, the port of listen %q", d, declared, listenPort, cfg.Listen)
	}
	for _, p := range []struct{ probe, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		pr := mapping(c[p.probe])
		if got := str(dig(pr, "httpGet", "path")); got != p.path {
			t.Errorf("%s: %s.httpGet.path is %q, want %s", d, p.probe, got, p.path)
		}
		if n, ok := containerPort(c, dig(pr, "httpGet", "port")); !ok || n != listenPort {
			t.Errorf("%s: %s.httpGet.port %v is not the listen port %d", d, p.probe, dig(pr, "httpGet", "port"), listenPort)
		}
	}
	if sp := mapping(c["startupProbe"]); sp != nil {
		if n, ok := containerPort(c, dig(sp, "httpGet", "port")); !ok || n != listenPort {
			t.Errorf("%s: startupProbe.httpGet.port %v is not the listen port %d", d, dig(sp, "httpGet", "port"), listenPort)
		}
	}

	checkGrace(t, d, c, cfg)
	checkScrape(t, d, c, listenPort)

	labels := mapping(dig(d.doc, "spec", "template", "metadata", "labels"))
	var services int
	for _, s := range m.ofKind("Service") {
		if !labelsMatch(mapping(dig(s.doc, "spec", "selector")), labels) {
			continue
		}
		services++
		for _, p := range list(dig(s.doc, "spec", "ports")) {
			n, ok := containerPort(c, dig(p, "targetPort"))
			if dig(p, "targetPort") == nil {
				n, ok = dig(p, "port").(int)
			}
			if !ok || n != listenPort {
				t.Errorf("%s: targetPort %v does not reach the api's listen port %d", s, dig(p, "targetPort"), listenPort)
			}
		}
	}
	if services == 0 {
		t.Errorf("no Service selects the pods of %s (labels %v)", d, labels)
	}

	var pdbs int
	for _, p := range m.ofKind("PodDisruptionBudget") {
		if !labelsMatch(mapping(dig(p.doc, "spec", "selector", "matchLabels")), labels) {
			continue
		}
		pdbs++
		replicas, _ := dig(d.doc, "spec", "replicas").(int)
		if mu, ok := dig(p.doc, "spec", "maxUnavailable").(int); ok && (mu < 1 || mu >= replicas) {
			t.Errorf("%s: maxUnavailable %d with %d replicas either blocks node drains or allows an outage", p, mu, replicas)
		}
		if ma, ok := dig(p.doc, "spec", "minAvailable").(int); ok && (ma < 1 || ma >= replicas) {
			t.Errorf("%s: minAvailable %d with %d replicas either blocks node drains or allows an outage", p, ma, replicas)
		}
	}
	if pdbs == 0 {
		t.Errorf("no PodDisruptionBudget selects the pods of %s", d)
	}
}

func TestWorkerGraceAndAutoscaling(t *testing.T) {
	m := loadK8s(t)
	cfg := k8sConfig(t, m)
	w := m.mustFind(t, "Deployment", workerDeploy)
	if cs := containers(w); len(cs) > 0 {
		checkGrace(t, w, cs[len(cs)-1], deploymentConfig(t, m, workerDeploy))
	}

	var scaled []object
	for _, so := range m.ofKind("ScaledObject") {
		if str(dig(so.doc, "spec", "scaleTargetRef", "name")) == w.name() {
			scaled = append(scaled, so)
		}
	}
	if len(scaled) != 1 {
		t.Fatalf("want one ScaledObject whose scaleTargetRef.name is %q, found %d", w.name(), len(scaled))
	}
	so := scaled[0]
	if !strings.HasPrefix(str(dig(so.doc, "apiVersion")), "keda.sh/") {
		t.Errorf("%s: apiVersion %q is not KEDA's", so, str(dig(so.doc, "apiVersion")))
	}
	if k := str(dig(so.doc, "spec", "scaleTargetRef", "kind")); k != "" && k != "Deployment" {
		t.Errorf("%s: scaleTargetRef.kind is %q, want Deployment", so, k)
	}
	if dig(w.doc, "spec", "replicas") != nil {
		t.Errorf("%s: spec.replicas is set while %s scales it: every apply would reset the count", w, so)
	}
	lo, _ := dig(so.doc, "spec", "minReplicaCount").(int)
	hi, _ := dig(so.doc, "spec", "maxReplicaCount").(int)
	if lo < 2 || hi < lo {
		t.Errorf("%s: minReplicaCount %d, maxReplicaCount %d: want at least 2 workers and max ≥ min", so, lo, hi)
	}
	var js []map[string]any
	for _, tr := range list(dig(so.doc, "spec", "triggers")) {
		if str(dig(tr, "type")) == "nats-jetstream" {
			js = append(js, mapping(dig(tr, "metadata")))
		}
	}
	if len(js) != 1 {
		t.Fatalf("%s: want one nats-jetstream trigger, found %d", so, len(js))
	}
	md := js[0]
	if got := str(md["stream"]); got != cfg.NATS.Stream {
		t.Errorf("%s: trigger stream %q, but the workers consume stream %q (nats.stream)", so, got, cfg.NATS.Stream)
	}
	if got := str(md["consumer"]); got != cfg.NATS.Consumer {
		t.Errorf("%s: trigger consumer %q, but the workers share consumer %q (nats.consumer)", so, got, cfg.NATS.Consumer)
	}
	if str(md["account"]) == "" {
		t.Errorf(`%s: trigger account is empty ("$G" for a server without accounts)`, so)
	}
	if n, err := strconv.Atoi(str(md["lagThreshold"])); err != nil || n < 1 {
		t.Errorf("%s: lagThreshold %q is not a positive whole number", so, str(md["lagThreshold"]))
	}
	if _, port, err := net.SplitHostPort(str(md["natsServerMonitoringEndpoint"])); err != nil || port != "8222" {
		t.Errorf("%s: natsServerMonitoringEndpoint %q is not host:8222 (the NATS monitoring port)", so, str(md["natsServerMonitoringEndpoint"]))
	}
}

// checkGrace wants the pod's terminationGracePeriodSeconds to be at least minGrace and to
// cover the container's preStop sleep, shutdown_grace, within which the program stops after
// SIGTERM, and the 4.5 s it may then take to close its connections: otherwise the kubelet kills
// it while it still finishes what it holds.
func checkGrace(t *testing.T, d object, c map[string]any, cfg *config.Config) {
	t.Helper()
	grace, ok := dig(podSpec(d), "terminationGracePeriodSeconds").(int)
	if !ok {
		grace = 30 // Kubernetes' default
	}
	preStop, _ := dig(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	stop := int(math.Ceil(cfg.ShutdownGrace.D().Seconds()))
	const closing = 5 // 4.5 s, rounded up
	if grace < minGrace || grace < preStop+stop+closing {
		t.Errorf("%s: terminationGracePeriodSeconds %d; the program stops within shutdown_grace %s after a preStop of %d s, and closes within %d s more: want at least %d",
			d, grace, cfg.ShutdownGrace.D(), preStop, closing, max(minGrace, preStop+stop+closing))
	}
}

// checkScrape wants the pod template's Prometheus annotations to scrape /metrics on want, a
// port the container declares. Annotation values must be strings, or the API server refuses
// the object.
func checkScrape(t *testing.T, d object, c map[string]any, want int) {
	t.Helper()
	ann := mapping(dig(d.doc, "spec", "template", "metadata", "annotations"))
	for _, k := range []string{"prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"} {
		v, ok := ann[k]
		if !ok {
			t.Errorf("%s: pod template annotation %s is missing", d, k)
			continue
		}
		if _, ok := v.(string); !ok {
			t.Errorf("%s: pod template annotation %s is %v (%T); annotation values must be quoted strings", d, k, v, v)
		}
	}
	if got := str(ann["prometheus.io/scrape"]); got != "true" {
		t.Errorf(`%s: prometheus.io/scrape is %q, want "true"`, d, got)
	}
	if got := str(ann["prometheus.io/path"]); got != "/metrics" {
		t.Errorf("%s: prometheus.io/path is %q, want /metrics", d, got)
	}
	port, err := strconv.Atoi(str(ann["prometheus.io/port"]))
	if err != nil {
		t.Errorf("%s: prometheus.io/port %q is not a port number", d, str(ann["prometheus.io/port"]))
		return
	}
	if _, ok := declaredPort(c, port); !ok {
		t.Errorf("%s: prometheus.io/port %d is not a port the container declares", d, port)
	}
	if port != want {
		t.Errorf("%s: prometheus.io/port %d, but /metrics is served on %d", d, port, want)
	}
}

// declaredPort returns the container's ports entry of number n.
func declaredPort(c map[string]any, n int) (map[string]any, bool) {
	for _, p := range list(c["ports"]) {
		if cp, _ := dig(p, "containerPort").(int); cp == n {
			return mapping(p), true
		}
	}
	return nil, false
}

// listenFlag is the address of a -listen (or --listen) flag in the container's command line,
// which overrides the configuration's listen (the api) or worker.listen (the worker).
func listenFlag(t *testing.T, prog string, c map[string]any) (string, bool) {
	argv := commandLine(t, prog, c)
	for i, a := range argv {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "listen" {
			continue
		}
		if hasVal {
			return val, true
		}
		if i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

// commandLine is what a container of prog runs: its command, or else the ENTRYPOINT of the
// program's Dockerfile, followed by its args (the Dockerfiles have no CMD).
func commandLine(t *testing.T, prog string, c map[string]any) []string {
	t.Helper()
	argv := strSlice(c["command"])
	if c["command"] == nil {
		argv = entrypoint(t, prog)
	}
	return append(slices.Clone(argv), strSlice(c["args"])...)
}

// entrypoint is the ENTRYPOINT of prog's Dockerfile, in its exec form.
func entrypoint(t *testing.T, prog string) []string {
	t.Helper()
	path := filepath.Join("docker", prog+".Dockerfile")
	var argv []string
	for _, in := range parseDockerfile(t, path) {
		if in.cmd == "ENTRYPOINT" {
			argv = nil
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
				t.Fatalf("%s:%d: ENTRYPOINT is not in the exec form (a JSON array): %v", path, in.line, err)
			}
		}
	}
	if len(argv) == 0 {
		t.Fatalf("%s: no ENTRYPOINT", path)
	}
	return argv
}

// programFlags are the flags prog's main package defines, read from its source: each name, and
// whether it is a boolean flag (which takes no separate value).
func programFlags(t *testing.T, prog string) map[string]bool {
	t.Helper()
	src := readFile(t, filepath.Join("..", prog, "main.go"))
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`flag\.(\w+)\("([\w-]+)"`).FindAllSubmatch(src, -1) {
		flags[string(m[2])] = string(m[1]) == "Bool"
	}
	if len(flags) == 0 {
		t.Fatalf("%s/main.go: no flags found", prog)
	}
	return flags
}

// checkCommandLine: a container of prog runs the program's binary with -config naming the
// mounted configuration file, and every argument is a flag the program defines (Go's flag
// package stops at the first argument that is not a flag, and the programs take none).
func checkCommandLine(t *testing.T, prog string, d object, c map[string]any) {
	t.Helper()
	argv, image := commandLine(t, prog, c), entrypoint(t, prog)
	if len(argv) == 0 || argv[0] != image[0] {
		t.Errorf("%s: the container runs %q, not the program %s", d, argv, image[0])
		return
	}
	flags := programFlags(t, prog)
	config := ""
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		isBool, known := flags[name]
		switch {
		case !strings.HasPrefix(a, "-") || a == "-" || a == "--":
			t.Errorf("%s: argument %q of %q is not a flag: the program would stop reading flags there", d, a, argv)
			return
		case !known:
			t.Errorf("%s: %q: %s has no flag -%s", d, argv, prog, name)
			continue
		case !hasVal && !isBool:
			if i+1 == len(argv) {
				t.Errorf("%s: %q: flag -%s has no value", d, argv, name)
				continue
			}
			i++
			val = argv[i]
		}
		if name == "config" {
			config = val
		}
	}
	if config != configPath {
		t.Errorf("%s: %q reads the configuration from %q, not from the mounted %s", d, argv, config, configPath)
	}
}

func TestContainerCommandLines(t *testing.T) {
	m := loadK8s(t)
	for prog, name := range map[string]string{"api": apiDeployment, "worker": workerDeploy} {
		d := m.mustFind(t, "Deployment", name)
		for _, c := range list(podSpec(d)["containers"]) {
			checkCommandLine(t, prog, d, mapping(c))
		}
	}
}

// reachableHost says whether a listen host accepts connections from outside the container.
func reachableHost(host string) bool { return host == "" || host == "0.0.0.0" || host == "::" }

func TestWorkerProbesAndMetrics(t *testing.T) {
	m := loadK8s(t)
	cfg := deploymentConfig(t, m, workerDeploy)
	w := m.mustFind(t, "Deployment", workerDeploy)
	cs := list(podSpec(w)["containers"])
	if len(cs) != 1 {
		t.Fatalf("%s: want one container, found %d", w, len(cs))
	}
	c := mapping(cs[0])
	listen := cfg.Worker.Listen
	if v, ok := listenFlag(t, "worker", c); ok {
		listen = v
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("%s: worker.listen %q: %v", w, listen, err)
	}
	if !reachableHost(host) {
		t.Errorf("%s: the worker listens on %q, unreachable for the kubelet's probes and Prometheus; set worker.listen: 0.0.0.0:%s", w, listen, portText)
	}
	port, _ := strconv.Atoi(portText)
	if p, ok := declaredPort(c, port); !ok {
		t.Errorf("%s: no container port %d, the port of worker.listen %q", w, port, listen)
	} else if str(p["name"]) == "" {
		t.Errorf("%s: container port %d (worker.listen) has no name", w, port)
	}
	for _, p := range []struct{ probe, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		pr := mapping(c[p.probe])
		if pr == nil {
			t.Errorf("%s: no %s", w, p.probe)
			continue
		}
		if got := str(dig(pr, "httpGet", "path")); got != p.path {
			t.Errorf("%s: %s.httpGet.path is %q, want %s", w, p.probe, got, p.path)
		}
		if n, ok := containerPort(c, dig(pr, "httpGet", "port")); !ok || n != port {
			t.Errorf("%s: %s.httpGet.port %v is not the port %d of worker.listen", w, p.probe, dig(pr, "httpGet", "port"), port)
		}
	}
	if sp := mapping(c["startupProbe"]); sp != nil {
		if n, ok := containerPort(c, dig(sp, "httpGet", "port")); !ok || n != port {
			t.Errorf("%s: startupProbe.httpGet.port %v is not the port %d of worker.listen", w, dig(sp, "httpGet", "port"), port)
		}
	}
	checkScrape(t, w, c, port)
}

// ucsMetrics reads the names of the service's metrics from the source of pkg/metrics: the Name
// of every metric's options and the ucs_consumer_pending collector's description.
func ucsMetrics(t *testing.T) []string {
	t.Helper()
	src := string(readFile(t, metricsSource))
	var names []string
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`Name:\s*"(ucs_[a-z0-9_]+)"`),
		regexp.MustCompile(`NewDesc\(\s*"(ucs_[a-z0-9_]+)"`),
	} {
		for _, mm := range re.FindAllStringSubmatch(src, -1) {
			if !slices.Contains(names, mm[1]) {
				names = append(names, mm[1])
			}
		}
	}
	if !slices.Contains(names, "ucs_consumer_pending") {
		t.Fatalf("%s: ucs_consumer_pending not found: the pattern no longer matches the source", metricsSource)
	}
	if len(names) < 2 {
		t.Fatalf("%s: found only %v: the pattern no longer matches the source", metricsSource, names)
	}
	sort.Strings(names)
	return names
}

var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`(?i)\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promCall     = regexp.MustCompile(`^\s*(\(|(?i:by|without)\b)`) // after a function or aggregation's name
	promToken    = regexp.MustCompile(`\$?[A-Za-z_:][A-Za-z0-9_:]*|[0-9.][0-9A-Za-z_.+-]*`)
	promKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
		"bool", "offset", "inf", "nan", "start", "end"}
)

// promMetrics returns the metric names a PromQL expression selects: the identifiers left once
// strings, label matchers, ranges and grouping labels are removed, other than functions,
// aggregations, keywords, numbers and Grafana's $variables.
func promMetrics(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, "$1 ")
	var out []string
	skipNext := false
	for _, loc := range promToken.FindAllStringIndex(e, -1) {
		tok := e[loc[0]:loc[1]]
		if skipNext {
			skipNext = false
			continue
		}
		switch {
		case strings.HasPrefix(tok, "$"), tok[0] >= '0' && tok[0] <= '9', tok[0] == '.':
			continue
		case promCall.MatchString(e[loc[1]:]):
			continue // a function or an aggregation
		case slices.Contains(promKeywords, strings.ToLower(tok)):
			skipNext = strings.EqualFold(tok, "offset")
			continue
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	return out
}

func TestPromMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (le) (rate(ucs_delivery_seconds_bucket{job=~"$job", le!="+Inf"}[$__rate_interval]))`: {"ucs_delivery_seconds_bucket"},
		`histogram_quantile(0.95, sum without (instance) (rate(a_bucket[5m] offset 1h)))`:            {"a_bucket"},
		`go_goroutines{job="x"} and on (job, instance) ucs_sending_paused * 1e3`:                     {"go_goroutines", "ucs_sending_paused"},
		`sum(rate(x_sum[1m])) / sum(rate(x_count[1m])) > bool 0.5`:                                   {"x_sum", "x_count"},
		`max(ucs_consumer_pending)`: {"ucs_consumer_pending"},
	} {
		if got := promMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("promMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardPanels returns every panel of the dashboard, those inside rows included.
func dashboardPanels(v any) []map[string]any {
	var out []map[string]any
	for _, p := range list(v) {
		pm := mapping(p)
		out = append(out, pm)
		out = append(out, dashboardPanels(pm["panels"])...)
	}
	return out
}

func TestGrafanaDashboard(t *testing.T) {
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, dashboardFile), &dash); err != nil {
		t.Fatalf("%s: not valid JSON: %v", dashboardFile, err)
	}
	if v, _ := dash["schemaVersion"].(float64); v != 39 {
		t.Errorf("%s: schemaVersion is %v, want 39", dashboardFile, dash["schemaVersion"])
	}
	var input string
	for _, in := range list(dash["__inputs"]) {
		if str(dig(in, "type")) == "datasource" && str(dig(in, "pluginId")) == "prometheus" {
			input = "${" + str(dig(in, "name")) + "}"
		}
	}
	if input == "" {
		t.Errorf("%s: __inputs declares no Prometheus data source (e.g. DS_PROMETHEUS) to choose on import", dashboardFile)
	}
	known := ucsMetrics(t)
	used := map[string]bool{}
	ids := map[int]string{}
	panels := dashboardPanels(dash["panels"])
	if len(panels) == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	for _, p := range panels {
		title := str(p["title"])
		id, ok := p["id"].(float64)
		switch {
		case !ok || id != math.Trunc(id) || id < 1:
			t.Errorf("%s: panel %q has id %v, want a positive whole number", dashboardFile, title, p["id"])
		case ids[int(id)] != "":
			t.Errorf("%s: panels %q and %q share id %d", dashboardFile, ids[int(id)], title, int(id))
		default:
			ids[int(id)] = title
		}
		if str(p["type"]) == "row" {
			continue
		}
		if ds := str(dig(p, "datasource", "uid")); input != "" && ds != input {
			t.Errorf("%s: panel %q uses data source %q, not the input %s", dashboardFile, title, ds, input)
		}
		targets := list(p["targets"])
		if len(targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, title)
		}
		for _, tg := range targets {
			expr := str(dig(tg, "expr"))
			if strings.TrimSpace(expr) == "" {
				t.Errorf("%s: panel %q has a target without expr", dashboardFile, title)
				continue
			}
			if ds := str(dig(tg, "datasource", "uid")); input != "" && ds != "" && ds != input {
				t.Errorf("%s: panel %q: a query uses data source %q, not the input %s", dashboardFile, title, ds, input)
			}
			names := promMetrics(expr)
			if len(names) == 0 {
				t.Errorf("%s: panel %q: %q selects no metric", dashboardFile, title, expr)
			}
			for _, n := range names {
				if strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
					used[n] = true
					continue
				}
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && slices.Contains(known, b) {
						base = b
					}
				}
				if !slices.Contains(known, base) {
					t.Errorf("%s: panel %q: %q names %s, which %s does not define", dashboardFile, title, expr, n, metricsSource)
					continue
				}
				used[base] = true
			}
		}
	}
	for _, n := range known {
		if !used[n] {
			t.Errorf("%s: no panel shows %s", dashboardFile, n)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(used)), func(n string) bool { return strings.HasPrefix(n, "go_") }) {
		t.Errorf("%s: no panel shows the Go runtime (go_*)", dashboardFile)
	}
}

// composeDoc is compose.yaml, parsed.
func loadCompose(t *testing.T) map[string]any {
	t.Helper()
	docs := decodeAll(t, composeFile, readFile(t, composeFile))
	if len(docs) != 1 {
		t.Fatalf("%s: want one document, found %d", composeFile, len(docs))
	}
	return docs[0]
}

// composeEnv reads a service's environment in either of compose's forms.
func composeEnv(svc map[string]any) map[string]string {
	env := map[string]string{}
	switch e := svc["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			env[k] = str(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(str(kv), "=")
			env[k] = v
		}
	}
	return env
}

// composeDependsOn reads depends_on in either form: service name → condition.
func composeDependsOn(svc map[string]any) map[string]string {
	deps := map[string]string{}
	switch d := svc["depends_on"].(type) {
	case []any:
		for _, n := range d {
			deps[str(n)] = "service_started"
		}
	case map[string]any:
		for n, v := range d {
			deps[n] = str(dig(v, "condition"))
		}
	}
	return deps
}

// publishedContainerPorts reads ports in the short ("127.0.0.1:8080:8080/tcp") and long forms.
func publishedContainerPorts(svc map[string]any) []int {
	var out []int
	for _, p := range list(svc["ports"]) {
		var target string
		if m := mapping(p); m != nil {
			target = str(m["target"])
		} else {
			parts := strings.Split(str(p), ":")
			target, _, _ = strings.Cut(parts[len(parts)-1], "/")
		}
		if n, err := strconv.Atoi(target); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	services := mapping(c["services"])
	for _, want := range []string{"nats", "mongo", "api", "worker"} {
		if services[want] == nil {
			t.Errorf("%s: service %q is missing", composeFile, want)
		}
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		svc := mapping(services[n])
		for dep, cond := range composeDependsOn(svc) {
			dsvc := mapping(services[dep])
			switch {
			case dsvc == nil:
				t.Errorf("%s: service %q depends on %q, which does not exist", composeFile, n, dep)
			case cond == "service_healthy" && dsvc["healthcheck"] == nil:
				t.Errorf("%s: service %q waits for %q to be healthy, but %q has no healthcheck", composeFile, n, dep, dep)
			}
		}
		if img := str(svc["image"]); img != "" && svc["build"] == nil {
			if err := checkImageRef(img); err != nil {
				t.Errorf("%s: service %q: %v", composeFile, n, err)
			}
		}
	}
	if cmd := strings.Join(strSlice(dig(services, "nats", "command")), " "); !strings.Contains(cmd, "-js") || !strings.Contains(cmd, "-sd /data") {
		t.Errorf("%s: nats command %q does not enable JetStream with -js -sd /data", composeFile, cmd)
	}
	if cmd := strings.Join(strSlice(dig(services, "mongo", "command")), " "); !strings.Contains(cmd, "--replSet") {
		t.Errorf("%s: mongo command %q does not start a replica set (--replSet)", composeFile, cmd)
	}
	for _, dep := range []string{"nats", "mongo"} {
		for _, prog := range []string{"api", "worker"} {
			if got := composeDependsOn(mapping(services[prog]))[dep]; got != "service_healthy" {
				t.Errorf("%s: %s must wait for %s with condition service_healthy, has %q", composeFile, prog, dep, got)
			}
		}
	}
	// Compose stops a service's dependents first: workers before the api, whose callback takes
	// the receipts of the workers' last sends.
	if _, ok := composeDependsOn(mapping(services["worker"]))["api"]; !ok {
		t.Errorf("%s: worker must depend on api, so that compose stops the workers first", composeFile)
	}
	if n, _ := dig(services, "worker", "deploy", "replicas").(int); n < 2 {
		t.Errorf("%s: worker deploy.replicas is %v, want at least 2 sharing the consumer", composeFile, dig(services, "worker", "deploy", "replicas"))
	}

	cfg, err := config.Parse(readFile(t, composeConfig))
	if err != nil {
		t.Fatalf("%s: %v", composeConfig, err)
	}
	for _, prog := range []string{"api", "worker"} {
		svc := mapping(services[prog])
		if svc == nil {
			continue
		}
		checkComposeBuild(t, prog, svc)
		if !mountsFile(svc, composeConfig, configPath) {
			t.Errorf("%s: %s does not mount ./%s at %s", composeFile, prog, composeConfig, configPath)
		}
		c := *cfg
		env := composeEnv(svc)
		c.ApplyEnv(func(k string) string { return env[k] })
		c.Defaults()
		validateBothRoles(t, composeConfig+" with the environment of compose service "+prog, &c)
	}
	_, portText, err := net.SplitHostPort(withDefaults(cfg).Listen)
	if err != nil {
		t.Fatalf("%s: listen: %v", composeConfig, err)
	}
	if host, _, _ := net.SplitHostPort(withDefaults(cfg).Listen); host != "0.0.0.0" && host != "" && host != "::" {
		t.Errorf("%s: listen host %q is unreachable from outside the container; use 0.0.0.0", composeConfig, host)
	}
	port, _ := strconv.Atoi(portText)
	if got := publishedContainerPorts(mapping(services["api"])); !slices.Contains(got, port) {
		t.Errorf("%s: api publishes container ports %v, not %d of listen", composeFile, got, port)
	}

	// The workers' probes and metrics: reachable from outside the container, and the port
	// exposed or published.
	wl := withDefaults(cfg).Worker.Listen
	whost, wportText, err := net.SplitHostPort(wl)
	if err != nil {
		t.Fatalf("%s: worker.listen: %v", composeConfig, err)
	}
	if !reachableHost(whost) {
		t.Errorf("%s: worker.listen host %q is unreachable from outside the container; use 0.0.0.0", composeConfig, whost)
	}
	wport, _ := strconv.Atoi(wportText)
	worker := mapping(services["worker"])
	exposed := publishedContainerPorts(worker)
	for _, e := range strSlice(worker["expose"]) {
		if n, err := strconv.Atoi(strings.TrimSuffix(e, "/tcp")); err == nil {
			exposed = append(exposed, n)
		}
	}
	if !slices.Contains(exposed, wport) {
		t.Errorf("%s: worker neither exposes nor publishes %d, the port of worker.listen %q (ports and expose: %v)", composeFile, wport, wl, exposed)
	}

	// compose sends SIGKILL after stop_grace_period (10s unless set): it must exceed
	// shutdown_grace, within which both programs stop.
	grace := withDefaults(cfg).ShutdownGrace.D()
	for _, prog := range []string{"api", "worker"} {
		stop := 10 * time.Second
		if v := str(dig(services, prog, "stop_grace_period")); v != "" {
			if stop, err = time.ParseDuration(v); err != nil {
				t.Errorf("%s: %s stop_grace_period %q: %v", composeFile, prog, v, err)
				continue
			}
		}
		if stop <= grace {
			t.Errorf("%s: %s stop_grace_period %s does not exceed shutdown_grace %s of %s", composeFile, prog, stop, grace, composeConfig)
		}
	}
}

func withDefaults(c *config.Config) *config.Config {
	cc := *c
	cc.Defaults()
	return &cc
}

func strSlice(v any) []string {
	if s, ok := v.(string); ok {
		return strings.Fields(s)
	}
	var out []string
	for _, e := range list(v) {
		out = append(out, str(e))
	}
	return out
}

func mountsFile(svc map[string]any, src, dst string) bool {
	for _, v := range list(svc["volumes"]) {
		var from, to string
		if m := mapping(v); m != nil {
			from, to = str(m["source"]), str(m["target"])
		} else {
			parts := strings.Split(str(v), ":")
			if len(parts) >= 2 {
				from, to = parts[0], parts[1]
			}
		}
		if filepath.Clean(from) == filepath.Clean(src) && to == dst {
			return true
		}
	}
	return false
}

// checkComposeBuild wants the service built from the Dockerfile of its program.
func checkComposeBuild(t *testing.T, prog string, svc map[string]any) {
	t.Helper()
	b := mapping(svc["build"])
	if b == nil {
		t.Errorf("%s: %s has no build section with context and dockerfile", composeFile, prog)
		return
	}
	ctx := str(b["context"])
	if ctx == "" {
		ctx = "."
	}
	if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
		t.Errorf("%s: %s build context %q is not the repository root (no go.mod)", composeFile, prog, ctx)
	}
	df := filepath.Join(ctx, str(b["dockerfile"]))
	want := filepath.Join("docker", prog+".Dockerfile")
	gotAbs, err1 := filepath.Abs(df)
	wantAbs, err2 := filepath.Abs(want)
	if err1 != nil || err2 != nil || gotAbs != wantAbs {
		t.Errorf("%s: %s builds with %s, want deployments/%s", composeFile, prog, str(b["dockerfile"]), want)
	}
	if _, err := os.Stat(df); err != nil {
		t.Errorf("%s: %s: Dockerfile %s does not exist", composeFile, prog, df)
	}
}

// goMinor is the "1.26" of go.mod's go directive.
func goMinor(t *testing.T) string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, filepath.Join("..", "go.mod"))), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			parts := strings.SplitN(v, ".", 3)
			if len(parts) >= 2 {
				return parts[0] + "." + parts[1]
			}
		}
	}
	t.Fatal("../go.mod has no go directive")
	return ""
}

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	var out []instruction
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	var cur strings.Builder
	start := 0
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		cont := strings.HasSuffix(line, `\`)
		cur.WriteString(strings.TrimSuffix(line, `\`))
		cur.WriteByte(' ')
		if cont {
			continue
		}
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Errorf("%s: ends inside a continued line", path)
	}
	return out
}

func TestDockerfiles(t *testing.T) {
	for _, prog := range []string{"api", "worker"} {
		path := filepath.Join("docker", prog+".Dockerfile")
		t.Run(prog, func(t *testing.T) {
			ins := parseDockerfile(t, path)
			var stages [][]instruction
			var froms []string
			for _, in := range ins {
				if in.cmd == "FROM" {
					stages = append(stages, nil)
					froms = append(froms, in.args)
				}
				if len(stages) > 0 {
					stages[len(stages)-1] = append(stages[len(stages)-1], in)
				}
			}
			if len(stages) < 2 {
				t.Fatalf("%s: %d stage(s), want a build stage and a minimal final stage", path, len(stages))
			}
			for _, f := range froms {
				img := strings.Fields(f)
				if len(img) > 0 && !strings.HasPrefix(img[0], "--") {
					if err := checkImageRef(img[0]); err != nil {
						t.Errorf("%s: FROM %s: %v", path, f, err)
					}
				}
			}
			if want := "golang:" + goMinor(t); !strings.HasPrefix(froms[0], want) {
				t.Errorf("%s: the build stage is FROM %q, want %s (the Go version of go.mod)", path, froms[0], want)
			}

			// The build: modules in their own layer before the source, a static trimmed binary
			// of the right package.
			var copyMod, modLayer, copyAll, build int
			var buildArgs string
			for i, in := range ins {
				switch {
				case in.cmd == "COPY" && strings.Contains(in.args, "go.mod") && strings.Contains(in.args, "go.sum") && copyMod == 0:
					copyMod = i
				case in.cmd == "RUN" && strings.Contains(in.args, "go mod download"):
					modLayer = i
				case in.cmd == "COPY" && strings.Fields(in.args)[0] == "." && copyAll == 0:
					copyAll = i
				case in.cmd == "RUN" && strings.Contains(in.args, "go build"):
					build, buildArgs = i, in.args
				}
			}
			if copyMod == 0 || modLayer == 0 || copyAll == 0 || copyMod > modLayer || modLayer > copyAll {
				t.Errorf("%s: want `COPY go.mod go.sum` and `RUN go mod download` before `COPY . .`, so the module layer is cached", path)
			}
			if build == 0 {
				t.Fatalf("%s: no RUN go build", path)
			}
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w"} {
				if !strings.Contains(buildArgs, want) {
					t.Errorf("%s: go build line lacks %s: %s", path, want, buildArgs)
				}
			}
			fields := strings.Fields(buildArgs)
			if pkg := "./" + prog; !slices.Contains(fields, pkg) {
				t.Errorf("%s: go build does not build %s: %s", path, pkg, buildArgs)
			}
			for _, other := range []string{"./api", "./worker"} {
				if other != "./"+prog && slices.Contains(fields, other) {
					t.Errorf("%s: builds %s, the other program", path, other)
				}
			}

			final := stages[len(stages)-1]
			image := strings.Fields(froms[len(froms)-1])[0]
			user := ""
			var entry []string
			var copied []string
			for _, in := range final {
				switch in.cmd {
				case "USER":
					user = in.args
				case "ENTRYPOINT":
					if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
						t.Errorf("%s:%d: ENTRYPOINT must be in exec form (a JSON list) so signals reach the program: %v", path, in.line, err)
					}
				case "COPY":
					f := strings.Fields(in.args)
					copied = append(copied, f[len(f)-1])
				}
			}
			uid, _, _ := strings.Cut(user, ":")
			switch {
			case user == "" && !strings.HasSuffix(image, ":nonroot"):
				t.Errorf("%s: the final stage (FROM %s) sets no USER and its image is not :nonroot", path, image)
			case user != "" && (uid == "root" || uid == "0"):
				t.Errorf("%s: the final stage runs as %q", path, user)
			}
			if !strings.Contains(image, "distroless") && !strings.HasPrefix(image, "scratch") {
				t.Errorf("%s: final image %s is not minimal (distroless or scratch)", path, image)
			}
			if len(entry) == 0 {
				t.Fatalf("%s: the final stage has no ENTRYPOINT", path)
			}
			if i := slices.Index(entry, "-config"); i < 0 || i+1 >= len(entry) || entry[i+1] != configPath {
				t.Errorf("%s: ENTRYPOINT %q does not pass -config %s", path, entry, configPath)
			}
			if !slices.Contains(copied, entry[0]) {
				t.Errorf("%s: ENTRYPOINT runs %s, which the final stage does not COPY in (copies %v)", path, entry[0], copied)
			}
			if _, err := os.Stat(path + ".dockerignore"); err != nil {
				t.Errorf("%s: no %s.dockerignore beside it: the whole repository would be sent as context", path, filepath.Base(path))
			}
		})
	}
}

// placeholderMarker is what makes a secret-looking value acceptable: it says it is not real.
var placeholderMarker = regexp.MustCompile(`(?i)placeholder|change-me`)

// secretKeys are the keys whose values are secrets wherever they appear.
var secretKeys = regexp.MustCompile(`(?i)^(secret|client_secret|callback_token|encoding_aes_key|password|.*_password|.*_secret|.*_token|api_key)$`)

var (
	hexRun       = regexp.MustCompile(`[0-9a-fA-F]{32,}`)
	privateKey   = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)
	urlWithCreds = regexp.MustCompile(`[a-z][a-z0-9+.-]*://([^/\s:@]+):([^@\s/]+)@`)
)

func TestNoRealSecrets(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanText(t, path, string(b))
		if strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml") {
			scanYAML(t, path, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := loadK8s(t)
	for _, s := range m.ofKind("Secret") {
		if len(mapping(dig(s.doc, "data"))) > 0 {
			t.Errorf("%s: use stringData with marked placeholders, not base64 data a reviewer cannot read", s)
		}
		for k, v := range mapping(dig(s.doc, "stringData")) {
			// An embedded file (config.yaml) is YAML whose secret keys are checked as well.
			scanYAML(t, fmt.Sprintf("%s Secret %s key %s", s.file, s.name(), k), []byte(str(v)))
		}
	}
}

// scanText looks line by line for hex runs of key length, private keys and URLs with passwords.
func scanText(t *testing.T, path, text string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		at := fmt.Sprintf("%s:%d", path, i+1)
		marked := placeholderMarker.MatchString(line)
		for _, run := range hexRun.FindAllString(line, -1) {
			switch {
			case marked, strings.Count(run, run[:1]) == len(run):
			case strings.Contains(line, "client_secret_sha256:"):
				// The configuration's documented way to keep a secret out of a file: a SHA-256
				// of a high-entropy secret gives nothing away.
			default:
				t.Errorf("%s: %d hex digits look like a key or token; mark the line PLACEHOLDER if it is not real", at, len(run))
			}
		}
		if privateKey.MatchString(line) {
			t.Errorf("%s: a private key", at)
		}
		for _, mm := range urlWithCreds.FindAllStringSubmatch(line, -1) {
			if !placeholderMarker.MatchString(mm[2]) && !strings.HasPrefix(mm[2], "$") {
				t.Errorf("%s: a URL with a password that is not marked placeholder", at)
			}
		}
	}
}

// scanYAML wants every value of a secret key marked as a placeholder.
func scanYAML(t *testing.T, where string, b []byte) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Errorf("%s: not YAML: %v", where, err)
			return
		}
		walkYAML(&n, func(key, val *yaml.Node) {
			if val.Kind != yaml.ScalarNode || val.Value == "" || !secretKeys.MatchString(key.Value) {
				return
			}
			if !placeholderMarker.MatchString(val.Value) {
				t.Errorf("%s:%d: %s holds a value not marked as a placeholder (put real secrets in a Secret outside the repository)", where, val.Line, key.Value)
			}
		})
	}
}

func walkYAML(n *yaml.Node, visit func(key, val *yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			visit(n.Content[i], n.Content[i+1])
		}
	}
	for _, c := range n.Content {
		walkYAML(c, visit)
	}
}
