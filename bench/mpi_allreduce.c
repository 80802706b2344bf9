/* Open MPI's MPI_Allreduce (fp32 sum, in place) as a contender; rank 0 prints one JSON line per
 * size in cerar-bench-net's format (per run the slowest rank's seconds).
 * Built on demand by bench/run_suite.py: mpicc -O2 -o OUT bench/mpi_allreduce.c
 * usage: mpirun ... mpi_allreduce NAME REPEATS BYTES...   (NAME: the contender's name) */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int repeats = argc > 2 ? atoi(argv[2]) : 0;
  if (argc < 4 || repeats < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpi_allreduce NAME REPEATS BYTES...\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int s = 3; s < argc; ++s) {
    long count = atol(argv[s]) / 4;
    float* data = malloc(count * sizeof(float));
    double* times = malloc(repeats * sizeof(double));
    double* slowest = malloc(repeats * sizeof(double));
    double err = 0, want = n * (n + 1) / 2.0; /* small integers: the sum is exact */
    for (int rep = 0; rep <= repeats; ++rep) { /* run 0 warms up and is checked */
      for (long i = 0; i < count; ++i) data[i] = (float)(rank + 1);
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = MPI_Wtime() - start;
      if (rep) times[rep - 1] = t;
      else
        for (long i = 0; i < count; ++i) err = fmax(err, fabs(data[i] - want) / want);
    }
    double worst = 0;
    MPI_Reduce(times, slowest, repeats, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("{\"contender\": \"%s\", \"impl\": \"openmpi\", \"n\": %d, \"bytes\": %ld, "
             "\"c\": null, \"runs_s\": [", argv[1], n, count * 4);
      for (int k = 0; k < repeats; ++k) printf("%s%.6g", k ? ", " : "", slowest[k]);
      qsort(slowest, repeats, sizeof(double), cmp);
      double median = repeats % 2 ? slowest[repeats / 2]
                                  : (slowest[repeats / 2 - 1] + slowest[repeats / 2]) / 2;
      printf("], \"best_s\": %.6g, \"median_s\": %.6g, \"max_rel_err\": %g}\n", slowest[0], median,
             worst);
      fflush(stdout);
    }
    free(data);
    free(times);
    free(slowest);
  }
  MPI_Finalize();
  return 0;
}
