package infra

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The manifests are validated against the API of this Kubernetes release.
// kubeconform's own schemas are downloaded from GitHub, which CI cannot
// reach; the same kind of schemas (openapi2jsonschema's "standalone
// strict") are made here from the OpenAPI document the release ships,
// api/openapi-spec/swagger.json of the k8s.io/kubernetes module, fetched
// through the Go module proxy and checked against the module's go.sum hash.
const (
	k8sVersion   = "1.36.3"
	k8sModule    = "k8s.io/kubernetes"
	k8sModuleSum = "h1:qDQdoMiluAE2Eab6Fa52YV+WjiGz9mZFFoagEA6cI+o="
)

// schemaLocation is kubeconform's default layout, under a local directory.
const schemaLocation = "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"

var kubeSchemaDir struct {
	once sync.Once
	dir  string
	err  error
}

// kubeSchemas returns a directory holding a strict JSON schema for every
// kind of the pinned Kubernetes release, in kubeconform's layout. It is
// made once per test binary.
func kubeSchemas(t *testing.T) string {
	t.Helper()
	kubeSchemaDir.once.Do(func() {
		kubeSchemaDir.dir, kubeSchemaDir.err = makeKubeSchemas()
	})
	if kubeSchemaDir.err != nil {
		t.Fatal(kubeSchemaDir.err)
	}
	return kubeSchemaDir.dir
}

func makeKubeSchemas() (string, error) {
	spec, err := kubernetesOpenAPI()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "seqflow-kubeschemas-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "v"+k8sVersion+"-standalone-strict")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	files, err := strictSchemas(spec)
	if err != nil {
		return "", err
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(out, name), body, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// kubernetesOpenAPI returns the release's swagger.json from the module
// cache, downloading the module if needed.
func kubernetesOpenAPI() ([]byte, error) {
	cmd := exec.Command("go", "mod", "download", "-json", k8sModule+"@v"+k8sVersion)
	// Outside this module: the download is not one of its requirements.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	var mod struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(raw, &mod); jerr != nil || err != nil || mod.Error != "" {
		return nil, fmt.Errorf("go mod download %s@v%s: %v %s %s", k8sModule, k8sVersion, err, mod.Error, stderr.String())
	}
	if mod.Sum != k8sModuleSum {
		return nil, fmt.Errorf("%s@v%s has hash %s, want %s", k8sModule, k8sVersion, mod.Sum, k8sModuleSum)
	}
	return os.ReadFile(filepath.Join(mod.Dir, "api", "openapi-spec", "swagger.json"))
}

// strictSchemas turns an OpenAPI v2 document into one JSON schema file per
// group, version and kind, named as kubeconform looks them up
// (deployment-apps-v1.json). Each file holds the definitions its kind
// reaches; every object with declared properties rejects any other
// (kubeconform -strict), int-or-string fields take a string or an integer,
// quantities a string of their syntax or a number, as the API server
// takes them.
func strictSchemas(spec []byte) (map[string][]byte, error) {
	var doc struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("decode swagger.json: %w", err)
	}
	if len(doc.Definitions) < 100 {
		return nil, fmt.Errorf("swagger.json has %d definitions", len(doc.Definitions))
	}
	defs := map[string]any{}
	for name, d := range doc.Definitions {
		defs[name] = strictNode(d)
	}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{
		"oneOf": []any{map[string]any{"type": "string", "pattern": quantityPattern}, map[string]any{"type": "number"}},
	}
	files := map[string][]byte{}
	for name, d := range doc.Definitions {
		gvks, _ := d.(map[string]any)["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			file := strings.ToLower(kind) + kindSuffix(group, version) + ".json"
			if _, dup := files[file]; dup || kind == "" {
				continue
			}
			reach := map[string]any{}
			collectRefs(defs, name, reach)
			body, err := json.Marshal(map[string]any{
				"$ref":        "#/definitions/" + name,
				"definitions": reach,
			})
			if err != nil {
				return nil, err
			}
			files[file] = body
		}
	}
	return files, nil
}

// quantityPattern is resource.Quantity's syntax (k8s.io/apimachinery's
// quantity.go): a decimal number and a binary suffix (Ki ... Ei), a decimal
// one (n u m k M G T P E) or an exponent.
const quantityPattern = `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`

// kindSuffix is kubeconform's {{ .KindSuffix }}: "-v1" for the core group,
// "-apps-v1", "-policy-v1", "-rbac-v1" (the group's first label) otherwise.
func kindSuffix(group, version string) string {
	if group == "" {
		return "-" + strings.ToLower(version)
	}
	return "-" + strings.ToLower(strings.Split(group, ".")[0]) + "-" + strings.ToLower(version)
}

// strictNode returns a copy of a schema node made strict.
func strictNode(n any) any {
	switch x := n.(type) {
	case map[string]any:
		if x["format"] == "int-or-string" || x["x-kubernetes-int-or-string"] == true {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		out := make(map[string]any, len(x)+1)
		for k, v := range x {
			switch k {
			case "properties":
				props := map[string]any{}
				for p, s := range v.(map[string]any) {
					props[p] = strictNode(s)
				}
				out[k] = props
			case "items", "additionalProperties", "not":
				out[k] = strictNode(v)
			case "allOf", "anyOf", "oneOf":
				var list []any
				for _, s := range v.([]any) {
					list = append(list, strictNode(s))
				}
				out[k] = list
			default:
				out[k] = v
			}
		}
		_, hasProps := x["properties"]
		_, hasAdditional := x["additionalProperties"]
		if hasProps && !hasAdditional && x["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
		return out
	default:
		return n
	}
}

// collectRefs adds name and every definition it refers to, transitively.
func collectRefs(defs map[string]any, name string, into map[string]any) {
	if _, done := into[name]; done {
		return
	}
	d, ok := defs[name]
	if !ok {
		return
	}
	into[name] = d
	var walk func(any)
	walk = func(n any) {
		switch x := n.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				collectRefs(defs, strings.TrimPrefix(ref, "#/definitions/"), into)
			}
			for _, v := range x {
				walk(v)
			}
		case []any:
			for _, v := range x {
				walk(v)
			}
		}
	}
	walk(d)
}
