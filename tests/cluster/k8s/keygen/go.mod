// The service-account key-pair writer up.sh uses only when openssl is missing (standard
// library only, so it has a module of its own, apart from the per-version wrapper modules).
module rust-batch/tests/cluster/k8s/keygen

go 1.22
