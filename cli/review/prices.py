"""The dated price table the review's cost estimate reads. An estimate, not a quote.

Region: us-east-1, USD, table dated 2026-12-02. Where a price is the same in every commercial
region it says so; elsewhere the review names the table's region beside the figure.

Instances: HyperPod bills its ml.* instances at SageMaker AI's on-demand list rate per
instance-hour (aws.amazon.com/sagemaker-ai/pricing). SAGEMAKER_RATE holds the rates this table
could source, each with where it was read (SAGEMAKER_SOURCES); the pricing page renders its
tables client-side, so they were read as the AWS Price List API gives them (service
AmazonSageMaker, on-demand, training usage), from public price tables that pin the API's
figures, where two agree or one names the API as its source. The public tables disagree on
P4d, P4de and P5 (rates from before and after the June 2025 reduction) and on ml.t3.2xlarge,
one gives ml.c5.18xlarge, and none was found for ml.m5.8xlarge, ml.m5.16xlarge, Trainium or the
other GPU types here: those stay at the floor. A type without a sourced
SageMaker rate is priced at the EC2 On-Demand Linux rate of the same hardware (INSTANCE_FLOOR)
and marked as a floor: SageMaker's rate is at or above it (ml.g5.8xlarge: $3.06 against EC2's
$2.448). Every EC2 row is the AWS Price List API's rate (EC2_FLOOR_SOURCE, 2026-07-20),
P4d, P4de and P5 at their prices after EC2's June 2025 reduction as datareceipts' GPU pricing
gave them too (retrieved 2026-11-09). A type with neither gets a stated floor where a priced
type bounds it from below (a part of a size of its family, or of the older generation it
succeeds: stated_floor, which says which and why). Every type the catalogue accepts has one of
the three; a type with none (one the catalogue gains before this table does) is shown unpriced
instead of guessed, and the review says the part of a change it does know.
"""

from __future__ import annotations

REGION = "us-east-1"
AS_OF = "2026-12-02"
HOURS_PER_MONTH = 730  # AWS's own convention in the pricing calculator

# SageMaker AI on-demand list rates, us-east-1, per instance-hour, with where each was read.
SAGEMAKER_AS_OF = "2026-12-04"
_PRICE_LIST_TABLES = (
    "AWS Price List API (AmazonSageMaker, on-demand training) as pinned by two public price tables that agree "
    "(a SageMaker workshop's INSTANCE_RATES and a training service's TRAINING_COST_PER_HOUR)"
)
_THREE_TABLES = (
    "SageMaker's on-demand rates as three public SageMaker price tables give them alike (a cost estimator's, an "
    "endpoint cost table's, a cloud job cost model's)"
)
_PRICE_LIST_SYNCED = "AWS Price List API (AmazonSageMaker, on-demand training) as synced into a public training service's rate table"
SAGEMAKER_RATE = {
    "ml.m5.xlarge": 0.23,
    "ml.m5.2xlarge": 0.461,
    "ml.m5.4xlarge": 0.922,
    "ml.m5.12xlarge": 2.765,
    "ml.m5.24xlarge": 5.53,
    "ml.c5.4xlarge": 0.816,
    "ml.c5.9xlarge": 1.836,
    "ml.t3.xlarge": 0.20,
    "ml.g5.8xlarge": 3.06,
    "ml.g5.12xlarge": 7.09,
    "ml.g5.24xlarge": 10.18,
    "ml.g5.48xlarge": 20.36,
    "ml.g6.8xlarge": 2.518,
    "ml.g6.12xlarge": 5.752,
    "ml.g6.48xlarge": 16.688,
    "ml.g6e.12xlarge": 13.12,
    "ml.g6e.48xlarge": 37.66,
}
SAGEMAKER_SOURCES = {
    **{t: _PRICE_LIST_TABLES for t in ("ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge",
                                        "ml.g5.24xlarge", "ml.g5.48xlarge", "ml.g6.12xlarge", "ml.g6.48xlarge")},
    **{t: _PRICE_LIST_SYNCED for t in ("ml.g6.8xlarge", "ml.g6e.12xlarge", "ml.g6e.48xlarge")},
    **{t: _THREE_TABLES for t in ("ml.m5.12xlarge", "ml.m5.24xlarge", "ml.c5.4xlarge", "ml.c5.9xlarge")},
    "ml.t3.xlarge": "SageMaker's on-demand rate as two public SageMaker price tables give it (a workshop's, an endpoint cost table's)",
}


# EC2 On-Demand Linux, us-east-1, per hour: the floor where no SageMaker rate is sourced. Every
# row is the AWS Price List API's rate as Karpenter's generated table pins it (EC2_FLOOR_SOURCE);
# the t3, m5, c5, g5, g6, g6e, p4d, p4de, p5.48xlarge and trn1 rows were read elsewhere first and
# agree with it to the digit.
EC2_FLOOR_SOURCE = (
    "AWS Price List API (AmazonEC2, us-east-1, OnDemand, Linux, Shared tenancy, no pre-installed software) as "
    "aws/karpenter-provider-aws pins it in pkg/providers/pricing/zz_generated.pricing_aws.go at 6fc13b52 "
    "(\"generated at 2026-07-20T13:44:30Z for us-east-1\")"
)
INSTANCE_FLOOR = {
    "ml.t3.xlarge": 0.1664,
    "ml.t3.2xlarge": 0.3328,
    "ml.m5.xlarge": 0.192,
    "ml.m5.2xlarge": 0.384,
    "ml.m5.4xlarge": 0.768,
    "ml.m5.8xlarge": 1.536,
    "ml.m5.12xlarge": 2.304,
    "ml.m5.16xlarge": 3.072,
    "ml.m5.24xlarge": 4.608,
    "ml.c5.4xlarge": 0.68,
    "ml.c5.9xlarge": 1.53,
    "ml.c5.18xlarge": 3.06,
    "ml.g5.8xlarge": 2.448,
    "ml.g5.12xlarge": 5.672,
    "ml.g5.24xlarge": 8.144,
    "ml.g5.48xlarge": 16.288,
    "ml.g6.8xlarge": 2.0144,
    "ml.g6.12xlarge": 4.6016,
    "ml.g6.48xlarge": 13.3504,
    "ml.g6e.12xlarge": 10.49264,
    "ml.g6e.48xlarge": 30.13118,
    "ml.gr6.4xlarge": 1.5392,
    "ml.gr6.8xlarge": 2.4464,
    "ml.p4d.24xlarge": 21.957642,
    "ml.p4de.24xlarge": 27.44705,
    "ml.p5.48xlarge": 55.04,
    "ml.p5.4xlarge": 6.88,
    # The newer training GPUs with a us-east-1 On-Demand row in EC2_FLOOR_SOURCE: each at or
    # above the generation it succeeds, as GENERATION_FLOORS holds for those with none.
    "ml.p5en.48xlarge": 63.296,
    "ml.p6-b200.48xlarge": 113.9328,
    "ml.p6-b300.48xlarge": 142.416,
    "ml.trn1.32xlarge": 21.50,
    "ml.trn1n.32xlarge": 24.78,
    # One size of each CPU family, its largest here: the family's other sizes are floored at
    # their share of it (stated_floor; EC2_FLOOR_SOURCE prices these families' sizes in
    # proportion, c6g.medium $0.034 to c6g.16xlarge $2.176). m7g.large's $0.0816 there is also
    # what factualminds.com's "Amazon EC2 On-Demand Pricing" (2026-06-17) states for us-east-1.
    "ml.c5n.18xlarge": 3.888,
    "ml.c6a.48xlarge": 7.344,
    "ml.c6g.16xlarge": 2.176,
    "ml.c6i.32xlarge": 5.44,
    "ml.c7g.16xlarge": 2.32,
    "ml.c8a.16xlarge": 3.44864,
    "ml.c8g.48xlarge": 7.65696,
    "ml.i3en.24xlarge": 10.848,
    "ml.m6a.48xlarge": 8.2944,
    "ml.m6g.16xlarge": 2.464,
    "ml.m6i.32xlarge": 6.144,
    "ml.m7g.16xlarge": 2.6112,
    "ml.m7i.48xlarge": 9.6768,
    "ml.m8a.16xlarge": 3.89504,
    "ml.m8g.48xlarge": 8.61696,
    "ml.r5d.16xlarge": 4.608,
    "ml.r6i.32xlarge": 8.064,
    "ml.r7i.48xlarge": 12.7008,
    # Every size of the GPU families: a GPU is a larger share of a smaller size, so a share of
    # the largest would floor g7e.2xlarge at $1.04 against its $3.36.
    "ml.g4dn.xlarge": 0.526,
    "ml.g4dn.2xlarge": 0.752,
    "ml.g4dn.4xlarge": 1.204,
    "ml.g4dn.8xlarge": 2.176,
    "ml.g4dn.12xlarge": 3.912,
    "ml.g4dn.16xlarge": 4.352,
    "ml.g7.2xlarge": 2.52,
    "ml.g7.4xlarge": 3.04208,
    "ml.g7.8xlarge": 4.08624,
    "ml.g7.12xlarge": 7.12832,
    "ml.g7.24xlarge": 14.25664,
    "ml.g7.48xlarge": 28.51328,
    "ml.g7e.2xlarge": 3.36312,
    "ml.g7e.4xlarge": 3.99816,
    "ml.g7e.8xlarge": 5.26824,
    "ml.g7e.12xlarge": 8.28608,
    "ml.g7e.24xlarge": 16.57216,
    "ml.g7e.48xlarge": 33.14432,
}

# Amazon EKS pricing: per cluster-hour, the same in every commercial region.
EKS_STANDARD = 0.10
EKS_EXTENDED = 0.60
# Amazon VPC pricing, us-east-1.
NAT_GATEWAY_HOUR = 0.045  # plus $0.045 per GB processed
INTERFACE_ENDPOINT_AZ_HOUR = 0.01  # per endpoint per AZ, plus $0.01 per GB
# Elastic Load Balancing, us-east-1: an Application Load Balancer's hour, and each load-balancer
# capacity unit (LCU) it uses an hour: Elastic Load Balancing's list rates as a FinOps write-up of
# May 2026 quotes them (cloud-horizons.com, "ALB: the line item nobody watches"); the pricing page
# itself renders its tables client-side and was not read here.
ALB_HOUR = 0.0225
ALB_LCU_HOUR = 0.008
# AWS KMS: per customer managed key-month, every region (the first rotation adds $1 a month each).
KMS_KEY_MONTH = 1.0
# Amazon Managed Service for Prometheus, us-east-1: the first 2 billion samples a month.
PROMETHEUS_PER_10M_SAMPLES = 0.90
# Amazon Managed Grafana: per active editor or administrator a month, every region.
GRAFANA_EDITOR_MONTH = 9.0


# -- stated floors: a type neither table prices, at no less than a part of a type it holds ------
#
# EC2 prices the sizes of a family by their resources: "For On-Demand Instances, the price per
# unit hour is the same when deploying one instance type as it is when deploying a different size
# of the same instance type" (EC2 Auto Scaling user guide, Spot price per unit hour example, with
# c5.4xlarge $0.68, c5.12xlarge $2.04, c5.24xlarge $4.08 as INSTANCE_FLOOR has them); where a GPU
# takes a larger share of a smaller size (g5.xlarge's one GPU on 4 vCPUs to g5.8xlarge's on 32),
# the smaller costs more per unit, never less. So a type T that has at least a fraction f of each
# of a priced type S's vCPUs, memory and accelerators costs at least f of S's rate (f at most 1:
# a larger T is floored at S's rate, not scaled up).
SIZE_FLOOR_SOURCE = ("EC2 prices a family's sizes by their resources (EC2 Auto Scaling user guide, Spot price per unit "
                     "hour example); a smaller size costs no less per unit")
# Families priced from an older generation of the same line, by the same rule: no AWS price
# table read here prices a newer generation of a line below an older one (the EC2 Capacity
# Blocks pricing page, US East (Ohio), prices p5e's 8 H200 at $43.26 an hour to p5's 8 H100 at
# $39.33; EC2_FLOOR_SOURCE prices p5en, p6-b200 and p6-b300 above p5). The three here have no
# On-Demand Linux row for us-east-1 in EC2_FLOOR_SOURCE: p5e, p6e-gb200 (sold as UltraServers)
# and trn2. family -> (the family it is at least, why).
_CAPACITY_BLOCKS = "the EC2 Capacity Blocks pricing page prices p5e (H200) at $43.26 an hour above p5 (H100) at $39.33, US East (Ohio)"
GENERATION_FLOORS = {
    "p5e": ("p5", "8 H200 on p5's host; " + _CAPACITY_BLOCKS),
    "p6e-gb200": ("p5", "GB200, a generation after p5's H100; " + _CAPACITY_BLOCKS),
    "trn2": ("trn1", "Trainium2, a generation after trn1's Trainium; " + _CAPACITY_BLOCKS),
}
# Families neither table prices nor bounds from a type they hold: never $0 and never guessed; the
# review leaves them out of a total and says what it does know.
UNPRICED_WHY = "no SageMaker or EC2 rate of its family was read from a source, and no priced type bounds it from below"


def _family(instance_type: str) -> str:
    return instance_type.split(".")[1]


def _listed(instance_type: str) -> tuple[float | None, str]:
    if instance_type in SAGEMAKER_RATE:
        return SAGEMAKER_RATE[instance_type], "sagemaker"
    if instance_type in INSTANCE_FLOOR:
        return INSTANCE_FLOOR[instance_type], "floor"
    return None, "unpriced"


def stated_floor(instance_type: str) -> tuple[float, str] | None:
    """(hourly floor, why) of a type neither table prices: the most that any listed type of its
    family (or of the family GENERATION_FLOORS names) gives by the rule above; None where none does."""
    from infra import catalogue

    t = catalogue.figures(instance_type)
    if t is None or not t.vcpus or not t.memory_gib:
        return None
    family = _family(instance_type)
    older, why = GENERATION_FLOORS.get(family, (None, SIZE_FLOOR_SOURCE))
    best = None
    for name, s in catalogue.CATALOGUE.items():
        rate = _listed(name)[0]
        if rate is None or _family(name) not in (family, older) or not s.vcpus or not s.memory_gib:
            continue
        ratios = [t.vcpus / s.vcpus, t.memory_gib / s.memory_gib]
        if s.accelerators:
            ratios.append((t.accelerators or 0) / s.accelerators)
        share = min(1.0, *ratios)
        if share > 0 and (best is None or rate * share > best[0]):
            held = "at least as much of everything" if share == 1.0 else f"at least {share:.3g} of each of its resources"
            best = (round(rate * share, 4), f"at least {share:.3g} x {name}'s ${rate:,.4g}: it has {held} ({why})")
    return best


def instance_rate(instance_type: str) -> tuple[float | None, str]:
    """(hourly rate, kind): kind is "sagemaker" (a sourced list rate), "floor" (EC2's rate of the
    same hardware, which SageMaker's is at or above, or a stated floor: floor_note says which) or
    "unpriced"."""
    rate, kind = _listed(instance_type)
    if rate is None and (floor := stated_floor(instance_type)):
        return floor[0], "floor"
    return rate, kind


def floor_note(instance_type: str) -> str | None:
    """Why a type's floor is its floor, where it is a stated one (not a row of INSTANCE_FLOOR)."""
    if _listed(instance_type)[0] is not None:
        return None
    floor = stated_floor(instance_type)
    return floor[1] if floor else None

