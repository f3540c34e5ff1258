// psacheck evaluates Kubernetes manifests with the Pod Security Admission's own policy
// code (k8s.io/pod-security-admission/policy, the checks the API server runs): for every
// workload it prints one JSON line with its namespace's policy, taken from the
// Namespace's pod-security.kubernetes.io labels as the admission controller reads them,
// and the verdict of each level (baseline, restricted) and of the enforced one.
//
// Usage: kubectl kustomize deploy/kubernetes | psacheck
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	Allowed bool     `json:"allowed"`
	Reasons []string `json:"reasons"`
	Details []string `json:"details"`
}

type report struct {
	Kind      string             `json:"kind"`
	Name      string             `json:"name"`
	Namespace string             `json:"namespace"`
	Enforce   string             `json:"enforce"`
	Audit     string             `json:"audit"`
	Warn      string             `json:"warn"`
	Levels    map[string]verdict `json:"levels"`
	Enforced  verdict            `json:"enforced"`
}

type workload struct {
	kind, name, namespace string
	meta                  *metav1.ObjectMeta
	spec                  *corev1.PodSpec
}

func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Equal(bytes.TrimRight(line, " \t"), []byte("---")) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		cur.Write(line)
		cur.WriteByte('\n')
	}
	return append(docs, cur.Bytes())
}

// decodeAs reads one manifest strictly: an unknown field is an error, as for the API server.
func decodeAs[T any](doc []byte) *T {
	var o T
	if err := yaml.UnmarshalStrict(doc, &o); err != nil {
		fmt.Fprintln(os.Stderr, "psacheck:", err)
		os.Exit(2)
	}
	return &o
}

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "psacheck:", err)
		os.Exit(2)
	}
	namespaces := map[string]map[string]string{}
	var workloads []workload
	for _, doc := range splitDocs(data) {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &head); err != nil || head.Kind == "" {
			continue
		}
		add := func(obj metav1.Object, t *corev1.PodTemplateSpec) {
			workloads = append(workloads, workload{head.Kind, obj.GetName(), obj.GetNamespace(), &t.ObjectMeta, &t.Spec})
		}
		switch head.Kind {
		case "Namespace":
			o := decodeAs[corev1.Namespace](doc)
			namespaces[o.Name] = o.Labels
		case "Pod":
			o := decodeAs[corev1.Pod](doc)
			add(o, &corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec})
		case "Deployment":
			o := decodeAs[appsv1.Deployment](doc)
			add(o, &o.Spec.Template)
		case "DaemonSet":
			o := decodeAs[appsv1.DaemonSet](doc)
			add(o, &o.Spec.Template)
		case "StatefulSet":
			o := decodeAs[appsv1.StatefulSet](doc)
			add(o, &o.Spec.Template)
		case "Job":
			o := decodeAs[batchv1.Job](doc)
			add(o, &o.Spec.Template)
		case "CronJob":
			o := decodeAs[batchv1.CronJob](doc)
			add(o, &o.Spec.JobTemplate.Spec.Template)
		}
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "psacheck:", err)
		os.Exit(2)
	}
	latest := api.LevelVersion{Level: api.LevelPrivileged, Version: api.LatestVersion()}
	defaults := api.Policy{Enforce: latest, Audit: latest, Warn: latest}
	eval := func(w workload, lv api.LevelVersion) verdict {
		agg := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, w.meta, w.spec))
		return verdict{agg.Allowed, append([]string{}, agg.ForbiddenReasons...), append([]string{}, agg.ForbiddenDetails...)}
	}
	out := json.NewEncoder(os.Stdout)
	for _, w := range workloads {
		labels, ok := namespaces[w.namespace]
		if !ok {
			fmt.Fprintf(os.Stderr, "psacheck: %s/%s: namespace %q is not among the manifests\n", w.kind, w.name, w.namespace)
			os.Exit(2)
		}
		p, errs := api.PolicyToEvaluate(labels, defaults)
		if len(errs) > 0 {
			fmt.Fprintf(os.Stderr, "psacheck: namespace %s: %v\n", w.namespace, errs.ToAggregate())
			os.Exit(2)
		}
		r := report{
			Kind: w.kind, Name: w.name, Namespace: w.namespace,
			Enforce: string(p.Enforce.Level), Audit: string(p.Audit.Level), Warn: string(p.Warn.Level),
			Levels:   map[string]verdict{},
			Enforced: eval(w, p.Enforce),
		}
		for _, l := range []api.Level{api.LevelBaseline, api.LevelRestricted} {
			r.Levels[string(l)] = eval(w, api.LevelVersion{Level: l, Version: api.LatestVersion()})
		}
		if err := out.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "psacheck:", err)
			os.Exit(2)
		}
	}
}
