#!/usr/bin/env python3
"""Tests of charts/gatehouse, run by scripts/test.sh: helm lint, helm template for several
value sets, each validated against the Kubernetes schemas (kubernetes-validate), the
rendered gatehouse.toml accepted by `gatehouse check`, and the properties the chart
promises (security context, probes, graceful termination, config checksum, monitoring
files identical to dashboards/, the admin listener's cap, token Secret and NetworkPolicy).

Environment: HELM (helm binary), GATEHOUSE (gatehouse binary), PROMTOOL (optional)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHART = os.path.join(HERE, "gatehouse")
HELM = os.environ.get("HELM", "helm")
GATEHOUSE = os.environ.get("GATEHOUSE", os.path.join(REPO, "target/debug/gatehouse"))
PROMTOOL = os.environ.get("PROMTOOL", "promtool")

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def run(args, ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if ok and p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"{' '.join(args)} failed")
    return p


def template(*sets):
    args = [HELM, "template", "t", CHART]
    for s in sets:
        args += ["--set", s]
    p = run(args, ok=False)
    return p


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def kind(ds, k, name=None):
    return [d for d in ds if d["kind"] == k and (name is None or d["metadata"]["name"] == name)]


VALUE_SETS = {
    "default": [],
    "tls": ["tls.enabled=true", "tls.secretName=site-tls", "tls.redirectHttp=true",
            "tls.hsts=max-age=63072000", "tls.http3=true"],
    "hpa": ["autoscaling.enabled=true", "autoscaling.requestsPerSecond.enabled=true"],
    "monitoring": ["monitoring.serviceMonitor.enabled=true",
                   "monitoring.prometheusRule.enabled=true",
                   "monitoring.grafanaDashboard.enabled=true"],
    "ingress": ["ingress.enabled=true", "ingress.className=nginx",
                "ingress.hosts[0].host=www.example.com", "ingress.hosts[0].paths[0]=/"],
    "acme": ["replicaCount=1", "acme.enabled=true", "acme.contact[0]=mailto:ops@example.com",
             "acme.domains[0]=example.com"],
    "quic-policy": ["tls.enabled=true", "tls.secretName=site-tls", "tls.http3=true",
                    "networkPolicy.enabled=true"],
    "admin": ["adminToken.secretName=gh-admin", "config.adminMaxConnections=16",
              "networkPolicy.enabled=true",
              "networkPolicy.adminFrom[0].namespaceSelector.matchLabels.name=monitoring"],
}

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def main():
    p = run([HELM, "lint", "--strict", CHART], ok=False)
    check(p.returncode == 0, f"helm lint --strict: {p.stdout}{p.stderr}")

    work = tempfile.mkdtemp()
    rendered = {}
    for name, sets in VALUE_SETS.items():
        p = template(*sets)
        check(p.returncode == 0, f"{name}: helm template: {p.stderr}")
        if p.returncode != 0:
            continue
        path = os.path.join(work, f"{name}.yaml")
        open(path, "w").write(p.stdout)
        rendered[name] = docs(p.stdout)
        # Every built-in kind against the Kubernetes schemas; the prometheus-operator
        # CRDs have none there and are checked below.
        v = run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", path], ok=False)
        bad = [l for l in (v.stdout + v.stderr).splitlines()
               if l.strip() and not any(f"kind {k} " in l for k in CRD_KINDS)]
        check(v.returncode == 0 and not bad, f"{name}: kubernetes-validate: {bad}")
        check_config(name, rendered[name], work)

    d = rendered["default"]
    dep = kind(d, "Deployment")[0]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    sc = c["securityContext"]
    check(pod["securityContext"]["runAsNonRoot"] is True, "pod runs as non-root")
    check(sc["readOnlyRootFilesystem"] is True, "read-only root filesystem")
    check(sc["allowPrivilegeEscalation"] is False, "no privilege escalation")
    check(sc["capabilities"]["drop"] == ["ALL"], "capabilities dropped")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        g = c[probe]["httpGet"]
        check(g["path"] == path and g["port"] == "admin" and g["scheme"] == "HTTP",
              f"{probe} on the admin {path}")
    check(ports.get("admin") == 9090, f"admin port {ports}")
    cm = kind(d, "ConfigMap")[0]["data"]["gatehouse.toml"]
    drain = int(cm.split('drain = "')[1].split("s")[0])
    check(pod["terminationGracePeriodSeconds"] > drain + 5,
          f"grace {pod['terminationGracePeriodSeconds']} s over the drain {drain} s and preStop")
    check("preStop" in c["lifecycle"], "a preStop hook")
    check(dep["spec"]["replicas"] == 2, "replicas from values")
    check(len(kind(d, "Service")) == 2, "a public and an admin Service")
    check(kind(d, "PodDisruptionBudget"), "a PodDisruptionBudget")
    check(pod.get("topologySpreadConstraints"), "topology spread")
    check(not kind(d, "HorizontalPodAutoscaler") and not kind(d, "Ingress")
          and not kind(d, "ServiceMonitor") and not kind(d, "NetworkPolicy"),
          "optional parts off by default")
    check_admin_defaults(d)

    # A config change rolls the pods; anything else doesn't change the checksum.
    def checksum(*sets):
        ds = docs(template(*sets).stdout)
        return kind(ds, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    base = checksum()
    check(checksum("config.logLevel=debug") != base, "a config change changes the checksum")
    check(checksum("replicaCount=3") == base, "a replica change leaves the checksum")

    t = rendered["tls"]
    pod = kind(t, "Deployment")[0]["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    check("subPath" not in mounts["tls"], "the TLS Secret is mounted whole, so renewals reach the pod")
    check(any(v.get("secret", {}).get("secretName") == "site-tls" for v in pod["volumes"]),
          "the TLS volume is the Secret")
    check(any(p["name"] == "https" for p in kind(t, "Service", "t-gatehouse")[0]["spec"]["ports"]),
          "the Service has https")
    # HTTP/3: UDP on the port Alt-Svc advertises (the listener's, 8443), in the container
    # and the Service, beside TCP 443.
    svc_ports = {(p["port"], p["protocol"]) for p in kind(t, "Service", "t-gatehouse")[0]["spec"]["ports"]}
    check((8443, "UDP") in svc_ports and (443, "TCP") in svc_ports, f"the Service has UDP 8443: {svc_ports}")
    c_ports = {(p["containerPort"], p["protocol"]) for p in pod["containers"][0]["ports"]}
    check((8443, "UDP") in c_ports, f"the container opens UDP 8443: {c_ports}")
    plain_ports = {p["protocol"] for p in kind(rendered["default"], "Service", "t-gatehouse")[0]["spec"]["ports"]}
    check(plain_ports == {"TCP"}, f"no UDP without tls.http3: {plain_ports}")

    h = rendered["hpa"]
    hpa = kind(h, "HorizontalPodAutoscaler")[0]
    check([m["type"] for m in hpa["spec"]["metrics"]] == ["Resource", "Pods"], "HPA on CPU and requests/s")
    check("replicas" not in kind(h, "Deployment")[0]["spec"], "no fixed replicas under an HPA")

    m = rendered["monitoring"]
    sm = kind(m, "ServiceMonitor")[0]
    check(sm["spec"]["endpoints"][0]["port"] == "admin" and sm["spec"]["endpoints"][0]["path"] == "/metrics",
          "ServiceMonitor scrapes the admin port's /metrics")
    admin = kind(m, "Service", "t-gatehouse-admin")[0]
    check(all(admin["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
          "the ServiceMonitor selects the admin Service")
    pr = kind(m, "PrometheusRule")[0]
    shipped = []
    for f in ["rules.yml", "alerts.yml"]:
        shipped += yaml.safe_load(open(os.path.join(REPO, "dashboards/prometheus", f)))["groups"]
    check(pr["spec"]["groups"] == shipped, "the PrometheusRule holds dashboards/prometheus's rules")
    rules = os.path.join(work, "rules.yml")
    yaml.safe_dump({"groups": pr["spec"]["groups"]}, open(rules, "w"))
    if shutil.which(PROMTOOL):
        p = run([PROMTOOL, "check", "rules", rules], ok=False)
        check(p.returncode == 0, f"promtool on the PrometheusRule: {p.stdout}{p.stderr}")
    dash = kind(m, "ConfigMap", "t-gatehouse-dashboard")[0]
    check(dash["metadata"]["labels"].get("grafana_dashboard") == "1", "the sidecar's label")
    shipped_dash = json.load(open(os.path.join(REPO, "dashboards/grafana/dashboards/gatehouse.json")))
    check(json.loads(dash["data"]["gatehouse.json"]) == shipped_dash, "the dashboard as shipped")
    for f, src in [("gatehouse.json", "dashboards/grafana/dashboards/gatehouse.json"),
                   ("rules.yml", "dashboards/prometheus/rules.yml"),
                   ("alerts.yml", "dashboards/prometheus/alerts.yml")]:
        check(open(os.path.join(CHART, "files", f)).read() == open(os.path.join(REPO, src)).read(),
              f"charts/gatehouse/files/{f} is a copy of {src} (cp it over)")

    i = rendered["ingress"]
    ing = kind(i, "Ingress")[0]
    check(ing["spec"]["rules"][0]["host"] == "www.example.com", "the Ingress host")

    a = rendered["acme"]
    check(kind(a, "PersistentVolumeClaim"), "ACME keeps its state on a PVC")
    check(kind(a, "Deployment")[0]["spec"]["strategy"]["type"] == "Recreate", "one ACME pod at a time")

    q = kind(rendered["quic-policy"], "NetworkPolicy")[0]["spec"]["ingress"]
    opened = [(p["port"], p["protocol"]) for r in q if "from" not in r for p in r["ports"]]
    check(opened == [("http", "TCP"), ("https", "TCP"), ("https-quic", "UDP")],
          f"the NetworkPolicy lets HTTP/3 in: {opened}")

    check("admin" in rendered, "the admin value set renders")
    if "admin" in rendered:
        check_admin_hardened(rendered["admin"])
    # A NetworkPolicy with no adminFrom: the admin port is the node's (probes) alone.
    ds = docs(template("networkPolicy.enabled=true").stdout)
    rules = kind(ds, "NetworkPolicy")[0]["spec"]["ingress"]
    check(not any(p["port"] == "admin" for r in rules for p in r.get("ports", [])),
          f"no peer reaches the admin port without adminFrom: {rules}")

    # Wrong values fail at install time, saying which.
    p = template("replicaCount=two")
    check(p.returncode != 0 and "replicaCount" in p.stderr, f"a bad value is refused: {p.stderr}")
    p = template("service.type=Internal")
    check(p.returncode != 0 and "service.type" in p.stderr, f"an unknown Service type is refused: {p.stderr}")
    p = template("acme.enabled=true", "replicaCount=3")
    check(p.returncode != 0 and "one replica" in p.stderr, f"several ACME replicas are refused: {p.stderr}")
    p = template("tls.enabled=true")
    check(p.returncode != 0 and "secretName" in p.stderr, f"TLS without a Secret is refused: {p.stderr}")

    print(f"chart: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def toml_value(cm, key):
    for line in cm.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip()
    return None


def check_admin_defaults(d):
    """The admin listener by default: capped, no token (so /reload refused off loopback),
    and off the public Service."""
    cm = kind(d, "ConfigMap", "t-gatehouse")[0]["data"]["gatehouse.toml"]
    check(toml_value(cm, "admin_max_connections") == "64", "the admin listener's connection cap")
    check(toml_value(cm, "admin_token") is None and toml_value(cm, "admin_token_file") is None,
          "no token unless a Secret is named")
    public = kind(d, "Service", "t-gatehouse")[0]["spec"]
    check(all(p["targetPort"] != "admin" for p in public["ports"]),
          f"the admin port is not on the public Service: {public['ports']}")
    admin = kind(d, "Service", "t-gatehouse-admin")[0]["spec"]
    check(admin["type"] == "ClusterIP", "the admin Service stays inside the cluster")


def check_admin_hardened(ds):
    """adminToken from a Secret, mounted as a file the ConfigMap only names; a
    NetworkPolicy that lets only adminFrom (and the node) reach the admin port."""
    cm = kind(ds, "ConfigMap", "t-gatehouse")[0]["data"]["gatehouse.toml"]
    check(toml_value(cm, "admin_token_file") == '"/etc/gatehouse/admin/token"',
          f"the token file in the config:\n{cm}")
    check(toml_value(cm, "admin_token") is None, "no token value in the ConfigMap")
    check(toml_value(cm, "admin_max_connections") == "16", "adminMaxConnections")
    pod = kind(ds, "Deployment")[0]["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    sec = vols.get("admin-token", {}).get("secret", {})
    check(sec.get("secretName") == "gh-admin" and sec.get("items") == [{"key": "token", "path": "token"}],
          f"the token volume is the Secret's key: {sec}")
    check(sec.get("defaultMode") == 0o440, f"the token readable by the pod's group only: {sec}")
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    m = mounts.get("admin-token", {})
    check(m.get("mountPath") == "/etc/gatehouse/admin" and m.get("readOnly") is True
          and "subPath" not in m, f"the token mounted read-only: {m}")
    np = kind(ds, "NetworkPolicy")
    check(len(np) == 1, "a NetworkPolicy")
    if not np:
        return
    spec = np[0]["spec"]
    check(spec["podSelector"]["matchLabels"] == kind(ds, "Deployment")[0]["spec"]["selector"]["matchLabels"],
          "the NetworkPolicy selects the pods")
    check(spec["policyTypes"] == ["Ingress"], "ingress is what it isolates")
    open_ports = [p["port"] for r in spec["ingress"] if "from" not in r for p in r["ports"]]
    check(open_ports == ["http"], f"only the public port open to all: {open_ports}")
    admin_rules = [r for r in spec["ingress"] if any(p["port"] == "admin" for p in r["ports"])]
    check(len(admin_rules) == 1 and admin_rules[0].get("from")
          == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
          f"the admin port only from adminFrom: {admin_rules}")


def check_config(name, ds, work):
    """`gatehouse check` accepts the rendered gatehouse.toml, with only its in-pod paths
    pointed at local stand-ins (the site, a certificate, the ACME state directory)."""
    cm = kind(ds, "ConfigMap", "t-gatehouse")[0]["data"]["gatehouse.toml"]
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "tls"), exist_ok=True)
    os.makedirs(os.path.join(d, "acme"), exist_ok=True)
    os.makedirs(os.path.join(d, "admin"), exist_ok=True)
    open(os.path.join(d, "admin/token"), "w").write("c2VjcmV0LWFkbWluLXRva2Vu\n")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "30", "-subj", "/CN=gatehouse.test",
         "-addext", "subjectAltName=DNS:gatehouse.test",
         "-keyout", os.path.join(d, "tls/tls.key"), "-out", os.path.join(d, "tls/tls.crt")])
    local = (cm.replace("/srv/site", os.path.join(REPO, "examples/site"))
               .replace("/etc/gatehouse/tls", os.path.join(d, "tls"))
               .replace("/var/lib/gatehouse/acme", os.path.join(d, "acme"))
               .replace("/etc/gatehouse/admin", os.path.join(d, "admin")))
    conf = os.path.join(d, "gatehouse.toml")
    open(conf, "w").write(local)
    p = run([GATEHOUSE, "--config", conf, "check"], ok=False)
    check(p.returncode == 0, f"{name}: gatehouse check:\n{p.stdout}{p.stderr}\n{local}")


if __name__ == "__main__":
    main()
